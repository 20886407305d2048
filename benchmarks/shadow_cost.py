"""What same-batch comparators cost: a testbed step with and without them, in one process.

The group testbed (`grpo`: the warm-started nano policy, 8 prompts x G = 8, 4 minibatches)
runs the same seed without comparators, with the one `lmpo compare` gives a two-arm loss
claim (CE-GPPO's loss), and with a loss, an estimator (EBPO, its own moments) and a
controller (random stops) at once; the variants alternate over `--repeats` rounds so that
drift on a shared machine falls on all of them. Each run's cost is its median `time/step`
(evaluation off); the ratio is against the run without comparators. The parameter-gradient
cosine (`log.shadow_grad_cos`, diagnostic steps only) is timed separately: it is a
calibration option, not on by default.

    python benchmarks/shadow_cost.py [--steps 20] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch
from common import write_result

from lmpo.config import load_config
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

LOSS = {"cegppo": {"loss": {"name": "cegppo", "agg": "token-mean"}}}
ALL = LOSS | {"ebpo": {"advantage": {"name": "ebpo"}},
              "stop": {"controller": {"name": "random_stop", "hparams": {"savings": 0.2}}}}
VARIANTS = {
    "none": [],
    "loss": [f"log.comparators={json.dumps(LOSS)}"],
    "loss+estimator+controller": [f"log.comparators={json.dumps(ALL)}"],
    "loss+grad_cos": [f"log.comparators={json.dumps(LOSS)}", "log.shadow_grad_cos=true"],
}


def step_times(extra: list[str], steps: int, policy: str, threads: int) -> list[float]:
    cfg = load_config(TrainConfig, "grpo", [
        f"steps={steps}", f"policy={policy}", "log.eval_every=100000", "log.tensorboard=false",
        f"log.checkpoint_every={steps}", f"threads={threads}", *extra])
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, Path(tmp) / "run", progress=False)
        return [r["time/step"] for r in read_rows(Path(tmp) / "run" / "metrics.jsonl")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--policy", default="nano-chain-sum")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="shadow_cost")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    times: dict[str, list[float]] = {k: [] for k in VARIANTS}
    for _ in range(args.repeats):
        for name, extra in VARIANTS.items():
            times[name] += step_times(extra, args.steps, args.policy, args.threads)[1:]
    base = statistics.median(times["none"])
    rows = {name: {"median_step_s": statistics.median(t), "steps": len(t),
                   "ratio": statistics.median(t) / base} for name, t in times.items()}
    for name, r in rows.items():
        print(f"{name:28s} {r['median_step_s']:.3f} s/step  x{r['ratio']:.3f}")
    write_result(args.out, {"steps": args.steps, "repeats": args.repeats,
                            "policy": args.policy, "variants": rows,
                            "goal": "loss comparator <= 1.10 x a step without comparators"},
                 threads=args.threads)


if __name__ == "__main__":
    main()
