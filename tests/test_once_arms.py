"""`levels: once`: an arm the condition axis does not touch runs once, without any
level's overrides, and every level's claims pair with its runs; a premise on such arms
alone is judged once and gates every level."""

from __future__ import annotations

import json

import pytest

from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import parse_experiment

CLAIM = {"kind": "direction", "metric": "eval/accuracy_trained", "arms": ["a", "b"],
         "expect": "greater", "sentence": "a beats b", "min_effect": 0.01}
PREMISE = {"kind": "threshold", "metric": "policy/entropy", "arms": ["b_premise"],
           "statistic": "value", "expect": "below", "bound": 0.4,
           "sentence": "b's entropy collapses", "source": "the paper, Fig. 2"}
LEVELS = {"axis": "beta", "levels": {"L0": {"dose": 0, "loss": {"hparams": {"beta1": 0.1}}},
                                     "L1": {"dose": 1, "loss": {"hparams": {"beta1": 0.5}}}}}
NOISE = [0.02, -0.03, 0.01, -0.01, 0.03, -0.02]


def data(**extra) -> dict:
    return {"arms": {"a": {"preset": "cegppo"},
                     "b": {"preset": "grpo", "levels": "once",
                           "overrides": {"loss": {"hparams": {"eps_high": 0.28}}}},
                     "b_premise": {"preset": "grpo", "levels": "once", "seed_offset": 1000}},
            "steps": 2, "differs_in": ["loss"], "claims": [CLAIM], "conditions": LEVELS,
            "premises": [PREMISE]} | extra


def test_a_once_arm_runs_once_and_stands_at_every_level():
    exp = parse_experiment(data(), "x", "x.yaml").expand()
    arms = {a.name: a for a in exp.arms}
    assert sorted(arms) == ["a@L0", "a@L1", "b", "b_premise"]
    assert arms["b"].overrides == {"loss": {"hparams": {"eps_high": 0.28}}}  # no level's
    assert arms["a@L1"].overrides == {"loss": {"hparams": {"beta1": 0.5}}}
    claims = [(c["level"], c["arms"], c["role"]) for c in exp.claims]
    assert claims == [("L0", ["a@L0", "b"], "headline"), ("L1", ["a@L1", "b"], "descriptive"),
                      (None, ["b_premise"], "premise")]  # the premise judged once


def test_once_needs_conditions_and_may_set_what_a_level_sets():
    bad = data()
    del bad["conditions"]
    with pytest.raises(ConfigError, match=r"levels must list distinct levels .* or be "
                                          r"'once' \(with conditions\)"):
        parse_experiment(bad, "x", "x.yaml")
    clash = data()
    clash["arms"]["a"]["overrides"] = {"loss": {"hparams": {"beta1": 0.2}}}
    with pytest.raises(ConfigError, match="arm 'a' sets loss.hparams"):
        parse_experiment(clash, "x", "x.yaml")


def sweep(tmp_path, policy, entropy: float):
    """a@L0 and a@L1 beat b by 0.1 and 0.2 (plus noise) in accuracy; b_premise's entropy
    is `entropy`."""
    from tests.hand_sweep import hand_written_sweep

    def rows(run):
        gain = {"a@L0": 0.1, "a@L1": 0.2}.get(run.arm, 0.0)
        acc = 0.5 + (gain + NOISE[run.seed] if gain else 0.0)
        ent = entropy if run.arm == "b_premise" else 0.5
        return [{"step": t, "eval/accuracy_trained": acc, "policy/entropy": ent}
                for t in (1, 2)]

    spec = data(seeds=6, base={"policy": str(policy), "log": {"tensorboard": False}})
    return hand_written_sweep(tmp_path, spec, rows)


@pytest.mark.parametrize("entropy,verdict", [(0.2, "holds"), (0.6, "premise not met")])
def test_every_level_pairs_with_the_once_runs_and_one_premise_gates_them_all(
        tmp_path, tiny_policy_dir, entropy, verdict):
    from lmpo.experiments.report.write import report

    out = sweep(tmp_path, tiny_policy_dir, entropy)
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["a@L0", "a@L1", "b",
                                                                "b_premise"]
    assert len(list((out / "runs").glob("*/seed*"))) == 4 * 6  # b once, not once per level
    rep = json.loads(report(out).with_suffix(".json").read_text())
    l0, l1, premise = rep["claims"]
    assert premise["role"] == "premise" and premise.get("level") is None
    assert l0["effect"] == pytest.approx(0.1 + sum(NOISE) / 6)
    assert l1["effect"] == pytest.approx(0.2 + sum(NOISE) / 6)
    assert [l0["verdict"], l1["verdict"].split(" (")[0]] == [verdict, verdict]
