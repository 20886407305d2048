"""Shared by the benchmark scripts: where and how results are written."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

# the committed results; the smoke tests (tests/test_benchmarks.py) write elsewhere
RESULTS_DIR = Path(os.environ.get("LMPO_BENCH_RESULTS") or Path(__file__).parent / "results")


def machine(threads: int) -> str:
    model = platform.processor() or "cpu"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{platform.machine()}, {model}, {os.cpu_count()} cores, {threads} torch threads"


def commit() -> str:
    """The checked-out commit, with "+changes" if the working tree differs from it (results
    files aside: a benchmark run rewrites them)."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=Path(__file__).parent).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = [line for line in git("status", "--porcelain", "--untracked-files=no").splitlines()
               if "benchmarks/results/" not in line]
    return head + ("+changes" if changed else "")


def write_result(name: str, payload: dict, *, threads: int = 2) -> Path:
    """Write results/<name>.json with the command, the commit and the machine."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"command": f"python benchmarks/{Path(sys.argv[0]).name} " + " ".join(sys.argv[1:]),
            "commit": commit(), "machine": machine(threads)}
    path.write_text(json.dumps(head | payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path
