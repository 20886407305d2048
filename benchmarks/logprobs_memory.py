"""Peak memory and time: chunked token log-probs + entropy vs the naive log_softmax path.

Each measurement runs in a fresh subprocess: the logits [N, V] (float32, N = B*T)
are allocated first, the peak-RSS counter is reset (Linux clear_refs), then the
op runs; "extra peak" is the peak RSS above the logits themselves. The two paths
alternate, and times are the median of the repeats.

    python benchmarks/logprobs_memory.py [--rows 4096] [--vocab 32000 150000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def child(path: str, rows: int, vocab: int, backward: bool, repeats: int) -> dict:
    import torch

    from lmpo.logprobs import logprobs_and_entropy, naive_logprobs_and_entropy

    torch.set_num_threads(2)
    torch.manual_seed(0)
    logits = torch.randn(rows, vocab, requires_grad=backward)
    ids = torch.randint(0, vocab, (rows,))
    fn = {"chunked": logprobs_and_entropy, "naive": naive_logprobs_and_entropy}[path]
    times, peak = [], None
    for _ in range(repeats):
        Path("/proc/self/clear_refs").write_text("5")
        base = _status("VmRSS")
        t0 = time.perf_counter()
        lp, h = fn(logits[None], ids[None])
        if backward:
            (grad,) = torch.autograd.grad(lp.sum() + h.sum(), logits)
            del grad
        times.append(time.perf_counter() - t0)
        extra = _status("VmHWM") - base
        peak = extra if peak is None else max(peak, extra)
        del lp, h
    return {"seconds": statistics.median(times), "extra_peak_bytes": peak}


def run_child(path, rows, vocab, backward, repeats) -> dict:
    cmd = [sys.executable, __file__, "--child", path, "--rows", str(rows), "--vocab", str(vocab),
           "--repeats", str(repeats)] + (["--backward"] if backward else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--vocab", type=int, nargs="+", default=[32000, 150000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--child")
    ap.add_argument("--backward", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.rows, args.vocab[0], args.backward, args.repeats)))
        return

    from common import write_result
    from rich.console import Console
    from rich.table import Table

    rows = []
    for vocab in args.vocab:
        for backward in (False, True):
            res = {p: run_child(p, args.rows, vocab, backward, args.repeats)
                   for p in ("naive", "chunked")}
            rows.append({
                "vocab": vocab, "rows": args.rows, "pass": "fwd+bwd" if backward else "fwd",
                **{f"{p}_{k}": v[k] for p, v in res.items() for k in v},
                "memory_ratio": (res["chunked"]["extra_peak_bytes"]
                                 / res["naive"]["extra_peak_bytes"]),
                "time_ratio": res["chunked"]["seconds"] / res["naive"]["seconds"],
            })
    table = Table(title=f"chunked vs naive log-probs + entropy, B*T = {args.rows}, float32 logits")
    for col in ("vocab", "pass", "naive GB", "chunked GB", "mem ratio", "naive s", "chunked s",
                "time ratio"):
        table.add_column(col, justify="right")
    gb = 1024**3
    for r in rows:
        table.add_row(str(r["vocab"]), r["pass"], f"{r['naive_extra_peak_bytes'] / gb:.2f}",
                      f"{r['chunked_extra_peak_bytes'] / gb:.2f}", f"{r['memory_ratio']:.2f}x",
                      f"{r['naive_seconds']:.2f}", f"{r['chunked_seconds']:.2f}",
                      f"{r['time_ratio']:.2f}x")
    Console(width=150).print(table)
    write_result("logprobs_memory", {"rows": rows})


if __name__ == "__main__":
    main()
