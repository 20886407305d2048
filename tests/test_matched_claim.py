"""A claim read at matched drift (`matched: {x, level, window}`): each run's metric where
its drift first reaches the level, by hand; a run that never reaches it leaves the claim
and is counted; the claim is judged on the paired values like any direction claim."""

from __future__ import annotations

import json

import pytest
import yaml

from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import load_experiment, parse_experiment

CLAIM = {"kind": "direction", "metric": "eval/reward_mean", "arms": ["a", "b"],
         "expect": "greater", "sentence": "a scores higher at the same KL",
         "matched": {"x": "kl/ref", "level": 0.3, "window": 1}}


def rows_of(kl_per_step: list[float], reward_at_eval: dict[int, float]) -> list[dict]:
    return [{"step": t, "kl/ref": kl} | ({"eval/reward_mean": reward_at_eval[t]}
                                         if t in reward_at_eval else {})
            for t, kl in enumerate(kl_per_step, 1)]


def by_hand(seed: int, arm: str) -> tuple[list[dict], float]:
    """Rows (eval every 2 steps) and the value at KL 0.3 by linear interpolation between
    the evaluations around the crossing (window 1: the KL of the evaluation's own step)."""
    slope = 0.1 if arm == "a" else 0.05  # b drifts slower
    kl = [slope * t for t in range(1, 9)]
    reward = {t: 1.0 + 0.2 * t + (0.5 if arm == "a" else 0.0) + 0.01 * seed
              for t in (2, 4, 6, 8)}
    if arm == "b" and seed == 2:  # never reaches KL 0.3 (tops out at 0.2)
        kl = [min(k, 0.2) for k in kl]
        return rows_of(kl, reward), float("nan")
    # the first evaluation with kl >= 0.3 and the one before it
    evals = [(0, 0.0, 0.9)] + [(t, kl[t - 1], reward[t]) for t in (2, 4, 6, 8)]
    for (_, x0, y0), (_, x1, y1) in zip(evals, evals[1:], strict=False):
        if x1 >= 0.3:
            return rows_of(kl, reward), y0 + (y1 - y0) * (0.3 - x0) / (x1 - x0)
    raise AssertionError


def test_a_matched_claim_reads_each_run_at_the_level(tmp_path, tiny_policy_dir):
    from lmpo.experiments.report.write import report
    from lmpo.experiments.run.sweep import plan

    data = {"base": {"policy": str(tiny_policy_dir), "log": {"tensorboard": False}},
            "arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"}}, "seeds": 6,
            "steps": 8, "differs_in": ["loss"], "claims": [CLAIM]}
    path = tmp_path / "exp.yaml"
    path.write_text("# matched\n" + yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "sweep"
    want = {}
    for run in plan(load_experiment(path), out, jobs=1):
        rows, value = by_hand(run.seed, run.arm)
        want[(run.arm, run.seed)] = value
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        before = {"per_tier": {}, "accuracy_mean": 0.1, "reward_mean": 0.9,
                  "accuracy_trained": 0.1, "accuracy_other": None}
        (run.run_dir / "eval.json").write_text(json.dumps({"before": before}))
    md = report(out)
    [c] = json.loads(md.with_suffix(".json").read_text())["claims"]
    seeds = [s for s in range(6) if s != 2]
    diffs = [want[("a", s)] - want[("b", s)] for s in seeds]
    assert c["n"] == 5 and c["unreached"] == {"b": [2]}
    assert c["effect"] == pytest.approx(sum(diffs) / 5, abs=1e-12)
    assert c["claim"] == "eval/reward_mean at kl/ref = 0.3: a > b"
    assert "never reached the drift level, left out: b seeds 2" in md.read_text()


@pytest.mark.parametrize("bad,says", [
    ({"matched": {"x": "kl/ref"}}, r"matched is \{x: METRIC, level: > 0"),
    ({"matched": {"x": "kl/ref", "level": 0.3}, "reduce": "max"}, "it takes no reduce"),
    ({"kind": "spread", "expect": "lower"}, "matched reads a direction, equivalence or threshold"),
])
def test_a_malformed_matched_claim_is_one_line(bad, says):
    data = {"arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"}}, "steps": 2,
            "differs_in": ["loss"], "claims": [CLAIM | bad]}
    with pytest.raises(ConfigError, match=says):
        parse_experiment(data, "x", "x.yaml")
