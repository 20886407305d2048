"""A compare directory whose runs' rows are written by hand: the experiment `data` planned
as `lmpo compare` plans it (its configs, comparators and run directories), each run's
metrics.jsonl from `rows_of(run)`, and an eval.json, so `lmpo report` judges the rows."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

BEFORE = {"per_tier": {}, "accuracy_mean": 0.1, "reward_mean": 0.1, "accuracy_trained": 0.1,
          "accuracy_other": None}


def hand_written_sweep(tmp_path: Path, data: dict, rows_of) -> Path:
    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.run.sweep import plan

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "sweep"
    for run in plan(load_experiment(path), out, jobs=1):
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows_of(run)))
        (run.run_dir / "eval.json").write_text(json.dumps({"before": BEFORE}))
    return out
