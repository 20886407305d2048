"""Do the new rollout conditions engage the ratio mechanisms? The group testbed (`base`:
the warm-started nano policy on chain-sum t3d1, 4 minibatches per rollout batch) with
GRPO (PPO-clip), GRPO-OR and DPPO-TV, each on-policy (float32 rollouts), with rollouts 2
policy versions stale, and with simulated FP8 rollouts (W8A8); one seed, a short run.
For each run, the mean over its steps of each mechanism's engagement metric (clip
fraction, OR's overshoot before and after the update, DPPO's masked share, the rollout
mismatch and staleness). Settings fixed before the run: seed 0, 60 steps.

    python experiments/conditions_engagement.py --out experiments/results/conditions_engagement.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from lmpo.config import load_config
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

PRESETS = ("grpo", "grpo_or", "dppo_tv")
CONDITIONS = {"on_policy": [], "staleness_2": ["rollout.staleness=2"],
              "fp8_e4m3": ["rollout.dtype=fp8_e4m3"]}
KEYS = ("loss/clipfrac", "loss/clipfrac_low", "loss/clipfrac_high", "loss/or/overshoot_frac",
        "diag/or_overshoot_after", "loss/dppo/masked_frac", "loss/displacement",
        "rollout/logp_mismatch", "rollout/logp_mismatch_p99", "rollout/staleness",
        "reward/accuracy")


def run(preset: str, extra: list[str], steps: int, seed: int) -> dict:
    overrides = [f"steps={steps}", f"seed={seed}", "log.eval_every=100000",
                 "log.tensorboard=false", *extra]
    cfg = load_config(TrainConfig, preset, overrides)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        train(cfg, Path(tmp) / "run", progress=False)
        seconds = time.perf_counter() - t0
        rows = read_rows(Path(tmp) / "run" / "metrics.jsonl")
    out = {"overrides": overrides, "seconds": round(seconds, 1)}
    for key in KEYS:
        values = [r[key] for r in rows if key in r]
        if values:
            out[key] = statistics.fmean(values)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(2)
    results = {}
    for preset in PRESETS:
        for name, extra in CONDITIONS.items():
            results[f"{preset}/{name}"] = run(preset, extra, args.steps, args.seed)
            print(preset, name, json.dumps(results[f"{preset}/{name}"]), flush=True)
    Path(args.out).write_text(json.dumps({"steps": args.steps, "seed": args.seed,
                                          "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
