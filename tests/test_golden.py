"""The trainer's rows, bit for bit: short testbed runs through every path of the trainer's
middle (PPO with GAE, GRPO with a rollout correction on bf16 rollouts, ESPO's controller,
same-batch comparators, a resume) must give exactly the rows committed in
tests/golden/rows.json before its redesign (tests/golden/runs.py says how they were made).
Float results are bit-identical for one CPU, torch and thread count; the rows are kept
per machine, and a machine with none writes its own with `python -m tests.golden.runs`
from a commit whose rows are known good."""

from __future__ import annotations

import json

import pytest

from tests.golden.runs import HERE, RUNS, TINY, machine_key, produce

# metrics logged since the golden rows were written (each tested on its own:
# optim/update_norm in tests/test_design_rules.py); the rest must match bit for bit
ADDED = ("optim/update_norm",)


def without_added(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in ADDED}


def test_the_trainer_reproduces_its_golden_rows(tiny_policy_dir, tmp_path):
    saved = json.loads((HERE / "rows.json").read_text())
    key = machine_key()
    if key not in saved:
        pytest.skip(f"no golden rows for {key!r} (have: {', '.join(saved)}); write them from "
                    "a known-good commit with `python -m tests.golden.runs`")
    rows = json.loads(json.dumps(produce(tiny_policy_dir, tmp_path)))  # floats as saved
    golden = saved[key]
    assert sorted(rows) == sorted(golden)
    for name in golden:
        assert len(rows[name]) == len(golden[name]), name
        for got, want in zip(map(without_added, rows[name]), golden[name], strict=True):
            assert got == want, (name, got["step"], sorted(
                k for k in set(got) | set(want) if got.get(k) != want.get(k)))


@pytest.mark.parametrize("name", sorted(RUNS))
def test_the_metrics_a_config_declares_are_the_ones_its_run_logs(name):
    """Both ways, on every path of the golden runs (whichever machine wrote them): each
    logged key is declared (so no claim on a logged metric is refused up front), and each
    exact name declared is logged (so none on a missing one is let through)."""
    from lmpo.config import load_config
    from lmpo.trainer.metric_names import declared, logs
    from lmpo.trainer.train_config import TrainConfig

    preset, extra = RUNS[name]
    names = declared(load_config(TrainConfig, preset, ["policy=unused", *TINY, *extra]))
    for rows in json.loads((HERE / "rows.json").read_text()).values():
        keys = set().union(*map(set, rows[name]))
        assert sorted(k for k in keys if not logs(names, k)) == []
        assert [n for n in names if "*" not in n and n not in keys
                and not n.startswith("time/") and n not in ADDED] == []
