"""The `lmpo` command line."""

from __future__ import annotations

import argparse
import sys

from lmpo import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmpo", description="RL post-training of language models: policy-optimisation methods."
    )
    parser.add_argument("--version", action="version", version=f"lmpo {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
