"""How much of EBPO's advantage mass sits in the groups GRPO gives A = 0, per group size.

The EBPO third edition's engagement check (experiments/ebpo.yaml), not a claim: it is true by
construction that constant groups get A != 0 from the shrunk baseline; the question is how
much. In a group whose rewards are all equal every member has the same advantage, so with
the logged per-step shares (adv/allfail_frac, adv/allsuccess_frac, of groups) and the groups'
mean advantages (adv/allfail_mean, adv/allsuccess_mean),

    share of Sum|A| in all-fail groups = allfail_frac * |allfail_mean| / adv/abs_mean

(and likewise for all-success groups). Per run the step values are averaged over the run
(and over the first and last 50 steps), then the mean and range over seeds per level.
Reads the committed sweep rows; no model is run.

    python experiments/ebpo_allfail_share.py --out experiments/results/ebpo/allfail_share.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import fmean

import yaml

from lmpo.trainer.checkpoint import read_rows

SWEEP = Path(__file__).parent / "results/ebpo/sweep/runs"
WINDOW = 50  # steps at each end of the run


def step_shares(row: dict) -> dict | None:
    """A step's shares; None for a step without advantage mass (mean |A| 0 or not logged),
    where no share is defined."""
    total = row.get("adv/abs_mean")
    if not total:
        return None
    fail = row["adv/allfail_frac"] * abs(row["adv/allfail_mean"]) / total
    success = row["adv/allsuccess_frac"] * abs(row["adv/allsuccess_mean"]) / total
    return {"allfail_share": fail, "constant_share": fail + success,
            "allfail_frac": row["adv/allfail_frac"], "allfail_mean": row["adv/allfail_mean"]}


def run_shares(path: Path) -> dict:
    steps = [s for s in map(step_shares, read_rows(path)) if s]
    if not steps:
        raise ValueError(f"{path}: no step logs adv/abs_mean")
    out = {}
    for name, part in (("run", steps), ("first", steps[:WINDOW]), ("last", steps[-WINDOW:])):
        out[name] = {k: fmean(s[k] for s in part) for k in steps[0]}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", type=Path, default=SWEEP)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    levels: dict[str, dict] = {}
    for arm_dir in sorted(args.sweep.glob("ebpo@*")):
        level = arm_dir.name.split("@", 1)[1]
        config = yaml.safe_load(next(arm_dir.glob("seed*/config.yaml")).read_text())
        group = config["rollout"]["group_size"]
        runs = [run_shares(p) for p in sorted(arm_dir.glob("seed*/metrics.jsonl"))]
        summary = {}
        for window in ("run", "first", "last"):
            for key in runs[0][window]:
                vals = [r[window][key] for r in runs]
                summary[f"{window}/{key}"] = {"mean": fmean(vals), "min": min(vals),
                                              "max": max(vals)}
        levels[level] = {"group_size": group, "seeds": len(runs), **summary}
    for level, s in levels.items():
        print(f"{level}: all-fail groups {s['run/allfail_frac']['mean']:.1%} of groups, "
              f"{s['run/allfail_share']['mean']:.1%} of Sum|A| "
              f"(first {WINDOW} steps {s['first/allfail_share']['mean']:.1%}, "
              f"last {s['last/allfail_share']['mean']:.1%}); constant groups "
              f"{s['run/constant_share']['mean']:.1%} of Sum|A| ({s['seeds']} seeds)")
    if args.out:
        args.out.write_text(json.dumps(levels, indent=1) + "\n")
    return levels


if __name__ == "__main__":
    main()
