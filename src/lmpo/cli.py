"""The `lmpo` command line: sft, train, eval."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lmpo import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmpo", description="RL post-training of language models: policy optimisation.")
    parser.add_argument("--version", action="version", version=f"lmpo {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    sft = sub.add_parser("sft", help="supervised warm start of a tiny policy")
    sft.add_argument("--config", help="YAML config (defaults if omitted)")
    sft.add_argument("--out", help="output folder (overrides the config's out)")
    sft.add_argument("overrides", nargs="*", metavar="key=value")

    tr = sub.add_parser("train", help="RL-train a policy with any registered loss and advantage")
    tr.add_argument("--config", required=True, help="a preset from configs/ or your own YAML")
    tr.add_argument("--run-dir", required=True, help="where metrics, checkpoints and the policy go")
    tr.add_argument("--steps", type=int, help="override the config's steps")
    tr.add_argument("--seed", type=int, help="override the config's seed")
    tr.add_argument("--resume", action="store_true",
                    help="continue from the newest complete checkpoint in --run-dir")
    tr.add_argument("--quiet", action="store_true", help="no progress bar")
    tr.add_argument("overrides", nargs="*", metavar="key=value")

    ev = sub.add_parser("eval", help="greedy per-tier accuracy of a model or run")
    src = ev.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="a Hugging Face model folder")
    src.add_argument("--run", help="a run directory (evaluates its final policy)")
    ev.add_argument("--task", default="chain_sum")
    ev.add_argument("--per-tier", type=int, default=200)
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--max-new-tokens", type=int, default=32)
    ev.add_argument("--json", help="write the result here (default: <model>/eval_cli.json)")
    return parser


def cmd_sft(args) -> int:
    from rich.console import Console

    from lmpo.trainer.config import load_config
    from lmpo.trainer.evaluate import accuracy_table
    from lmpo.trainer.sft import SFTConfig, run_sft

    overrides = list(args.overrides) + ([f"out={args.out}"] if args.out else [])
    cfg = load_config(SFTConfig, args.config, overrides)
    summary = run_sft(cfg)
    console = Console()
    console.print(accuracy_table({"greedy": summary["eval"]},
                                 title=f"SFT {cfg.task} {cfg.size}: per-tier accuracy"))
    console.print(f"loss {summary['loss_first']:.3f} -> {summary['loss_last']:.3f} in "
                  f"{summary['seconds']:.0f} s; wrote {cfg.out}")
    return 0


def cmd_train(args) -> int:
    from rich.console import Console

    from lmpo.trainer.config import load_config
    from lmpo.trainer.evaluate import accuracy_table
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    overrides = list(args.overrides)
    overrides += [f"steps={args.steps}"] if args.steps is not None else []
    overrides += [f"seed={args.seed}"] if args.seed is not None else []
    cfg = load_config(TrainConfig, args.config, overrides)
    if not Path(cfg.policy, "config.json").exists():
        raise FileNotFoundError(f"starting policy {cfg.policy} not found: run `lmpo sft` first "
                                "(or set policy=DIR to a Hugging Face model folder)")
    summary = train(cfg, args.run_dir, resume=args.resume, progress=not args.quiet)
    Console().print(accuracy_table({"before": summary["before"], "after": summary["after"]},
                                   title=f"{Path(args.config).stem}: held-out greedy accuracy"))
    print(f"run directory: {args.run_dir}")
    return 0


def cmd_eval(args) -> int:
    import torch
    from rich.console import Console

    from lmpo.models import load_policy
    from lmpo.tasks import get_task
    from lmpo.trainer.evaluate import accuracy_table, evaluate, heldout_problems

    torch.set_num_threads(2)
    model_dir = Path(args.model) if args.model else Path(args.run) / "policy"
    model, tokenizer = load_policy(model_dir)
    task = get_task(args.task)
    problems = heldout_problems(task, args.per_tier, args.seed)
    result = evaluate(model, tokenizer, task, problems, max_new_tokens=args.max_new_tokens)
    Console().print(accuracy_table({str(model_dir): result}, title=f"{args.task}: greedy accuracy"))
    out = Path(args.json) if args.json else model_dir / "eval_cli.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


COMMANDS = {"sft": cmd_sft, "train": cmd_train, "eval": cmd_eval}


def main(argv: list[str] | None = None) -> int:
    from lmpo.trainer.config import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return COMMANDS[args.command](args)
    except (ConfigError, KeyError, FileNotFoundError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"lmpo {args.command}: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
