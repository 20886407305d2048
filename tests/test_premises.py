"""Premises on synthetic rows: met, failed and undecided, judged per level on their own
seeds (an arm with seed_offset), and what they do to the claims they gate; a premise that
reads the numbers its claims read, or has no source, is refused."""

from __future__ import annotations

import json

import pytest
import yaml

from lmpo.errors import ConfigError
from lmpo.experiments.design.premises import FAILED, MET, UNDECIDED, status
from lmpo.experiments.design.spec import load_experiment, parse_experiment

NOISE = [0.02, -0.03, 0.01, -0.01, 0.03, -0.02]
CLAIM = {"kind": "direction", "metric": "eval/accuracy_trained", "arms": ["a", "b"],
         "expect": "greater", "sentence": "a beats b", "min_effect": 0.01}


def premise(bound: float, **extra) -> dict:
    return {"kind": "threshold", "metric": "policy/entropy", "arms": ["b_premise"],
            "statistic": "value", "expect": "below", "bound": bound,
            "sentence": "b's entropy collapses", "source": "the paper, Fig. 2"} | extra


def sweep(tmp_path, policy, premises, entropy: list[float]):
    """A compare directory written by hand: a - b = 0.1 + noise in accuracy; the premise
    arm's final entropy per seed is `entropy`."""
    from lmpo.experiments.run.sweep import plan

    data = {"base": {"policy": str(policy), "log": {"tensorboard": False}},
            "arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"},
                     "b_premise": {"preset": "grpo", "seed_offset": 1000}},
            "seeds": 6, "steps": 2, "differs_in": ["loss"], "claims": [CLAIM],
            "premises": premises}
    path = tmp_path / "exp.yaml"
    path.write_text("# premises\n" + yaml.safe_dump(data, sort_keys=False))
    out = tmp_path / "sweep"
    runs = plan(load_experiment(path), out, jobs=1)
    before = {"per_tier": {}, "accuracy_mean": 0.1, "reward_mean": 0.1,
              "accuracy_trained": 0.1, "accuracy_other": None}
    for run in runs:
        acc = 0.5 + (0.1 + NOISE[run.seed] if run.arm == "a" else 0.0)
        ent = entropy[run.seed] if run.arm == "b_premise" else 0.5
        rows = [{"step": t, "eval/accuracy_trained": acc, "policy/entropy": ent}
                for t in (1, 2)]
        run.run_dir.mkdir(parents=True)
        (run.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (run.run_dir / "eval.json").write_text(json.dumps({"before": before}))
    return out, runs


@pytest.mark.parametrize("entropy,state,verdict", [
    ([0.20, 0.22, 0.21, 0.19, 0.20, 0.21], MET, "holds"),
    ([0.60, 0.62, 0.61, 0.59, 0.60, 0.61], FAILED, "premise not met"),
    ([0.20, 0.65, 0.30, 0.55, 0.25, 0.60], UNDECIDED, "premise undecided"),
])
def test_a_premise_gates_the_claims_at_its_level(tmp_path, tiny_policy_dir, entropy, state,
                                                 verdict):
    from lmpo.experiments.report.write import report

    out, runs = sweep(tmp_path, tiny_policy_dir, [premise(0.4)], entropy)
    seeds = {yaml.safe_load(r.config.read_text())["seed"] for r in runs if r.arm == "b_premise"}
    assert seeds == set(range(1000, 1006))  # its own seeds
    md = report(out)
    rep = json.loads(md.with_suffix(".json").read_text())
    claim, judged = rep["claims"]
    assert judged["role"] == "premise" and judged["premise_status"] == state
    assert judged["verdict"] == state and judged["source"] == "the paper, Fig. 2"
    assert claim["verdict"] == verdict
    if state != MET:
        assert claim["first"] == "holds"  # the paper's comparison, kept beside the label
        assert claim["reason"].startswith(f"premise 1 (b's entropy collapses): {state}")
    text = md.read_text()
    assert "## Premises" in text
    assert f"| 1 | policy/entropy: b_premise <= 0.4 | **{state}**" in text
    assert text.index("## Premises") < text.index("## Claims") and "the paper, Fig. 2" in text


def test_a_gain_premise_reads_the_evaluation_before_training(tmp_path, tiny_policy_dir):
    """reduce: gain is the last value minus the evaluation before training (eval.json's
    `before`): "GRPO gains >= 5 points" judged on the premise arm's own seeds."""
    from lmpo.experiments.report.write import report

    gain = premise(0.05, metric="eval/accuracy_trained", reduce="gain", expect="above",
                   sentence="GRPO learns here")
    out, _ = sweep(tmp_path, tiny_policy_dir, [gain], [0.5] * 6)
    rep = json.loads(report(out).with_suffix(".json").read_text())
    judged = rep["claims"][1]
    assert judged["effect"] == pytest.approx(0.5 - 0.1)  # final 0.5, before 0.1
    assert judged["premise_status"] == MET


def test_a_premise_on_the_numbers_its_claims_use_is_refused():
    data = {"arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"}}, "steps": 2,
            "differs_in": ["loss"], "claims": [CLAIM],
            "premises": [premise(0.7, metric="eval/accuracy_trained", arms=["b"])]}
    with pytest.raises(ConfigError, match=r"premises\[0\] reads eval/accuracy_trained of arm "
                                          r"'b', which claims\[0\] .* reads too"):
        parse_experiment(data, "x", "x.yaml")
    data["premises"][0]["gates"] = []  # gating nothing, it reads what it likes
    parse_experiment(data, "x", "x.yaml")


@pytest.mark.parametrize("bad,says", [
    ({"source": ""}, "a premise needs its source"),
    ({"gates": [3]}, r"gates must list claim indices in \[0, 1\)"),
])
def test_a_malformed_premise_is_one_line(bad, says):
    data = {"arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"},
                     "b_premise": {"preset": "grpo", "seed_offset": 1000}}, "steps": 2,
            "differs_in": ["loss"], "claims": [CLAIM], "premises": [premise(0.7) | bad]}
    with pytest.raises(ConfigError, match=says):
        parse_experiment(data, "x", "x.yaml")


def test_the_status_of_each_label():
    assert status({"verdict": "holds"}) == (MET, "")
    assert status({"verdict": "contradicted"})[0] == FAILED
    assert status({"verdict": "negligible"})[0] == FAILED
    assert status({"verdict": "insufficient seeds", "reason": "2 seeds"}) == (
        UNDECIDED, "insufficient seeds: 2 seeds")


def test_a_premise_against_another_level_reads_the_arm_at_both(tmp_path, tiny_policy_dir):
    """versus: L0 compares the premise arm at each other level with itself at L0, paired
    by seed (a precision that hurts GRPO: its accuracy there below its bf16 accuracy)."""
    data = {"arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"},
                     "b_premise": {"preset": "grpo", "seed_offset": 1000}}, "steps": 2,
            "differs_in": ["loss"], "claims": [CLAIM],
            "conditions": {"axis": "precision", "levels": {
                "L0": {"dose": 0}, "L1": {"dose": 1, "rollout": {"dtype": "bfloat16"}}}},
            "premises": [{"kind": "direction", "metric": "eval/accuracy_trained",
                          "arms": ["b_premise"], "versus": "L0", "expect": "less",
                          "sentence": "b is hurt here", "source": "the paper"}]}
    exp = parse_experiment(data, "x", "x.yaml")
    judged = [c for c in exp.expand().claims if c.get("role") == "premise"]
    assert [(c["level"], c["arms"]) for c in judged] == [
        ("L1", ["b_premise@L1", "b_premise@L0"])]
    data["premises"][0]["versus"] = "L9"
    with pytest.raises(ConfigError, match="versus names a condition level"):
        parse_experiment(data, "x", "x.yaml")
