"""Shared by the benchmark scripts: where and how results are written."""

from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path

RESULTS_DIR = Path(__file__).parent / "results"


def machine(threads: int) -> str:
    model = platform.processor() or "cpu"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{platform.machine()}, {model}, {os.cpu_count()} cores, {threads} torch threads"


def write_result(name: str, payload: dict, *, threads: int = 2) -> Path:
    """Write results/<name>.json with the command that produced it and the machine."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    head = {"command": f"python benchmarks/{name}.py " + " ".join(sys.argv[1:]),
            "machine": machine(threads)}
    path.write_text(json.dumps(head | payload, indent=2) + "\n")
    print(f"wrote {path}")
    return path
