"""Threads on a busy machine: `lmpo eval` and a short nano run at 1 and 2 torch threads,
alone and beside a process that keeps one core busy, with OpenMP's default (active) wait
and with `OMP_WAIT_POLICY=PASSIVE`.

An OpenMP team larger than the free cores spins at its barriers: each thread waits for the
slowest, which shares its core with the busy process. Each setting runs as its own process
(OpenMP reads the policy when it loads), on the same work. `auto` is lmpo's default (it
sets a passive wait only where another process keeps a core busy when it starts); the
goal: beside the busy process, auto within 1.3x of the best setting.

    python benchmarks/busy_threads.py      # writes benchmarks/results/busy_threads.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import write_result  # noqa: E402

BUSY = "import time\nwhile True:\n    pass\n"
# auto: lmpo's own choice (lmpo.process_env.adapt_waits: passive where a core is busy at
# start); ACTIVE: OpenMP's default spinning, what lmpo did before; spin10k: libgomp spins
# briefly, then sleeps
WAITS = {"auto": {}, "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
         "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"}, "spin10k": {"GOMP_SPINCOUNT": "10000"}}


def timed(argv: list[str], env: dict) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - started


def sums(tmp: Path) -> Path:
    """The tutorial's plain data: a+b= (a < 50, b < 20)."""
    path = tmp / "sums.jsonl"
    if not path.exists():
        path.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                                for a in range(50) for b in range(20)))
    return path


def work(kind: str, threads: int, tmp: Path, policy: str = "nano-chain-sum",
         small: bool = False) -> list[str]:
    """The command of one timing: `small` is the smoke test's size."""
    lmpo = [sys.executable, "-m", "lmpo"]
    if kind == "real_eval":  # the tutorial's first command, on the packaged SmolLM2
        return lmpo + ["eval", "--model", "smollm2-135m-instruct", "--task", str(sums(tmp)),
                       "--reward", "last_number", "--max-new-tokens", "128", "--per-tier",
                       "100", "--threads", str(threads)]
    if kind == "eval":
        return lmpo + ["eval", "--model", policy, "--per-tier", "2" if small else "50",
                       "--temperature", "1.0", "--samples", "4", "--threads", str(threads)]
    run = tmp / f"run-{time.time_ns()}"
    return lmpo + ["train", "--config", "grpo", "--run-dir", str(run), "--quiet",
                   f"policy={policy}", "steps=2" if small else "steps=20", f"threads={threads}",
                   "log.eval_every=100", "log.eval_per_tier=2" if small else
                   "log.eval_per_tier=10", "log.tensorboard=false"] + (
        ["rollout.batch_size=8", "rollout.max_new_tokens=4", "log.eval_max_new_tokens=4"]
        if small else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--work", nargs="+", default=["eval", "train"],
                    choices=("eval", "train", "real_eval"))
    ap.add_argument("--waits", nargs="+", default=["auto", "ACTIVE", "PASSIVE"],
                    choices=WAITS)
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--name", default="busy_threads")
    ap.add_argument("--states", nargs="+", default=["alone", "busy"], choices=("alone", "busy"))
    ap.add_argument("--policy", default="nano-chain-sum")
    ap.add_argument("--small", action="store_true", help="the smoke test's sizes")
    args = ap.parse_args()
    rows = []
    base = {k: v for k, v in os.environ.items()
            if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    with tempfile.TemporaryDirectory() as tmp:
        if not Path(args.policy).is_dir():  # a warm start is built before any timing
            subprocess.run(work("eval", 2, Path(tmp), args.policy, args.small), env=base,
                           check=True, capture_output=True)
        for busy in [state == "busy" for state in args.states]:
            hog = subprocess.Popen([sys.executable, "-c", BUSY]) if busy else None
            try:
                for kind in args.work:
                    for policy in args.waits:
                        env = base | WAITS[policy]
                        for threads in args.threads:
                            s = min(timed(work(kind, threads, Path(tmp), args.policy,
                                               args.small), env)
                                    for _ in range(args.repeats))
                            rows.append({"work": kind, "busy_core": busy, "wait": policy,
                                         "threads": threads, "seconds": round(s, 2)})
                            print(rows[-1], flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    write_result(args.name, {"rows": rows})


if __name__ == "__main__":
    main()
