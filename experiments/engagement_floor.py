"""Calibrating the engagement floor: how small a same-batch distance is "practically zero"?

On the group testbed (`grpo`: the warm-started nano policy on chain-sum t3d1, 4 minibatches
per rollout batch), on-policy and with rollouts 4 versions stale, one GRPO run each logs
against a set of comparator losses, on every minibatch, the distance of the two
policy-loss terms' per-token gradient weights (`shadow/<c>/weight_tv`) and, on every step,
the cosine between the two parameter gradients over the first minibatch
(`shadow/<c>/grad_cos`, the quantity the update actually follows):

- negative control: PPO-clip against itself (TV 0 and cosine 1 by construction: a check
  of the measurement, every step);
- positive control: PPO-clip against REINFORCE (the clip switched off entirely);
- between: PPO-clip at eps 0.15 and 0.3, CE-GPPO (its defaults), DRPO at the published
  delta 12.5 and at 0.5, DPPO-TV, CISPO, Output Reset (alpha 0.2), GSPO.

Rule, fixed before the runs: the floor is the largest weight TV such that every step of
every comparator at or below it moves the parameter gradient's direction by less than 1%
of the positive control's median movement (1 - cos); it is rounded down to one
significant digit. The default in lmpo.experiments.report.engagement must not exceed it.
Settings: seed 0, 40 steps per condition.

    python experiments/engagement_floor.py --out experiments/results/engagement_floor.json
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

COMPARATORS = {
    "same": {"loss": {"name": "ppo_clip"}},
    "reinforce": {"loss": {"name": "reinforce"}},
    "clip_0.15": {"loss": {"name": "ppo_clip", "hparams": {"eps_low": 0.15, "eps_high": 0.15}}},
    "clip_0.3": {"loss": {"name": "ppo_clip", "hparams": {"eps_low": 0.3, "eps_high": 0.3}}},
    "cegppo": {"loss": {"name": "cegppo"}},
    "drpo": {"loss": {"name": "drpo"}},
    "drpo_0.5": {"loss": {"name": "drpo", "hparams": {"delta": 0.5}}},
    "dppo_tv": {"loss": {"name": "dppo_tv"}},
    "cispo": {"loss": {"name": "cispo"}},
    "output_reset": {"loss": {"name": "output_reset"}},
    "gspo": {"loss": {"name": "gspo"}},
}
CONDITIONS = {"on_policy": [], "staleness_4": ["rollout.staleness=4"]}
NEGATIVE, POSITIVE = "same", "reinforce"
SHARE = 0.01  # of the positive control's median 1 - cos


def run(extra: list[str], steps: int, seed: int) -> list[dict]:
    comparators = json.dumps(COMPARATORS)
    cfg = load_config(TrainConfig, "grpo", [
        f"steps={steps}", f"seed={seed}", "log.eval_every=100000", "log.tensorboard=false",
        "log.policy_kl_every=1", "log.shadow_grad_cos=true", f"log.comparators={comparators}",
        *extra])
    with tempfile.TemporaryDirectory() as tmp:
        train(cfg, Path(tmp) / "run", progress=False)
        return read_rows(Path(tmp) / "run" / "metrics.jsonl")


def points(rows: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """{comparator: [(weight_tv, 1 - grad_cos) per step]}."""
    return {c: [(r[f"shadow/{c}/weight_tv"], 1.0 - r[f"shadow/{c}/grad_cos"]) for r in rows
                if f"shadow/{c}/grad_cos" in r] for c in COMPARATORS}


def floor_of(pts: dict[str, list[tuple[float, float]]]) -> dict:
    """The rule in the module docstring, from every condition's points."""
    movement = statistics.median(d for _, d in pts[POSITIVE])
    limit = SHARE * movement
    allpts = sorted(p for c, ps in pts.items() if c != NEGATIVE for p in ps)
    floor = 0.0
    for tv, _ in allpts:
        if all(d < limit for t, d in allpts if t <= tv):
            floor = tv
        else:
            break
    rounded = float(f"{floor:.0e}") if floor > 0 else 0.0
    if rounded > floor:
        rounded = float(f"{floor * 0.9:.0e}")
    return {"positive_median_1_minus_cos": movement, "limit_1_minus_cos": limit,
            "largest_tv_below_limit": floor, "floor": rounded,
            "first_point_above_limit": next(([t, d] for t, d in allpts if d >= limit), None)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="experiments/results/engagement_floor.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    merged: dict[str, list] = {c: [] for c in COMPARATORS}
    per_condition = {}
    t0 = time.time()
    for name, extra in CONDITIONS.items():
        pts = points(run([*extra, f"threads={args.threads}"], args.steps, args.seed))
        per_condition[name] = {c: {
            "weight_tv_median": statistics.median(t for t, _ in ps),
            "one_minus_cos_median": statistics.median(d for _, d in ps),
            "weight_tv_max": max(t for t, _ in ps), "one_minus_cos_max": max(d for _, d in ps),
            "points": [[round(t, 6), round(d, 8)] for t, d in ps]} for c, ps in pts.items()}
        for c, ps in pts.items():
            merged[c] += ps
    negative = merged[NEGATIVE]
    assert all(t == 0.0 and abs(d) < 1e-12 for t, d in negative), negative[:3]
    result = {"rule": __doc__.split("Rule, fixed before the runs: ")[1].split("\n\n")[0],
              "steps": args.steps, "seed": args.seed, "wall_s": round(time.time() - t0, 1),
              "conditions": per_condition, "negative_control_exact": True,
              "calibration": floor_of(merged)}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    cal = result["calibration"]
    print(f"floor {cal['floor']} (largest TV below the limit {cal['largest_tv_below_limit']:.4g};"
          f" limit 1 - cos {cal['limit_1_minus_cos']:.3g}); wall {result['wall_s']} s")
    for c in COMPARATORS:
        tv = [per_condition[k][c]["weight_tv_median"] for k in CONDITIONS]
        dc = [per_condition[k][c]["one_minus_cos_median"] for k in CONDITIONS]
        print(f"{c:14s} TV {' '.join(f'{x:.4f}' for x in tv)}  1-cos "
              f"{' '.join(f'{x:.2e}' for x in dc)}")


if __name__ == "__main__":
    main()
