"""Shared by the benchmark scripts: where and how results are written, and the FLOP floor
(`Floor`: the step's products at this process's measured matmul throughput) that
flop_floor.py and real_step.py both measure against."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from lmpo.process_env import cpu_model

# the committed results; the smoke tests (tests/test_benchmarks.py) write elsewhere
RESULTS_DIR = Path(os.environ.get("LMPO_BENCH_RESULTS") or Path(__file__).parent / "results")


def machine(threads: int) -> str:
    return f"{platform.machine()}, {cpu_model()}, {os.cpu_count()} cores, {threads} torch threads"


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


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def clock(device) -> float:
    """perf_counter after the device's queued work has finished."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def linears(c: dict) -> list[tuple[int, int]]:
    """(in, out) of one decoder layer's linear layers."""
    d, f = c["hidden_size"], c["intermediate_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    return [(d, q), (d, kv), (d, kv), (q, d), (d, f), (d, f), (f, d)]


def matmul_seconds(rows: int, k: int, n: int, dtype, repeats: int, device="cpu") -> float:
    """Median seconds of a [rows, k] x [k, n] product in `dtype` (float32 accumulation)."""
    a = torch.randn(rows, k, device=device).to(dtype)
    b = torch.randn(k, n, device=device).to(dtype)
    a @ b
    times = []
    for _ in range(repeats):
        t0 = clock(device)
        a @ b
        times.append(clock(device) - t0)
    return statistics.median(times)


class Floor:
    """Seconds of the step's products at this process's measured throughput (one median
    timing per distinct shape)."""

    def __init__(self, c: dict, dtype, repeats: int, device="cpu"):
        self.c, self.dtype, self.repeats, self.cache = c, dtype, repeats, {}
        self.device = device

    def product(self, rows: int, k: int, n: int, count: float = 1.0) -> float:
        key = (rows, k, n)
        if key not in self.cache:
            self.cache[key] = matmul_seconds(rows, k, n, self.dtype, self.repeats, self.device)
        return self.cache[key] * count

    def layers(self, rows: int, context: float, head_rows: int) -> float:
        """Every layer's linears at `rows`, attention of `rows` queries over `context` keys
        each (QK^T and AV), and the LM head over `head_rows`."""
        c = self.c
        d, L = c["hidden_size"], c["num_hidden_layers"]
        s = sum(self.product(rows, k, n) for k, n in linears(c)) * L
        s += self.product(rows, d, d, attention_flops(c, rows, context) / (2.0 * rows * d * d))
        return s + (self.product(head_rows, d, c["vocab_size"]) if head_rows else 0.0)

    def flops(self, rows: int, context: float, head_rows: int) -> float:
        c = self.c
        per_row = 2.0 * sum(k * n for k, n in linears(c)) * c["num_hidden_layers"]
        return (rows * per_row + attention_flops(c, rows, context)
                + 2.0 * head_rows * c["hidden_size"] * c["vocab_size"])


def attention_flops(c: dict, rows: int, context: float) -> float:
    heads = c["num_attention_heads"] * c["head_dim"]
    return 2 * 2.0 * rows * context * heads * c["num_hidden_layers"]
