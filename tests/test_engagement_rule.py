"""The verdict rules of docs/reproductions.md on synthetic per-seed values: engagement at
every boundary (equivalence and spread included), labels from Holm-adjusted intervals,
mediators, and a condition axis whose dose_response claim renders with its plot."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml

from lmpo.errors import ConfigError
from lmpo.experiments.report.engagement import below_floor, part_mediators
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.labels import judge
from lmpo.experiments.stats.multiplicity import holm_adjust, step_down_alphas
from lmpo.experiments.stats.seeds import EFFECTIVE, effective_flags
from tests.hand_sweep import hand_written_sweep

DIRECTION = {"kind": "direction", "expect": "greater", "min_effect": 0.05}
WHY = "same-batch weight_tv below the floor"


def values(mean, sd=0.01, n=5):
    """n per-seed differences with exactly this mean and sample sd."""
    z = np.array([-2.0, -1.0, 0.0, 1.0, 2.0][:n])
    z = (z - z.mean()) / z.std(ddof=1)
    return mean + sd * z, np.zeros(n)


@pytest.mark.parametrize("mean,label", [
    (0.0, "not engaged"),       # interval around 0: nothing to hide, treatment inert
    (0.004, "not engaged"),     # the interval still includes 0
    (0.05, "holds"),            # significant: the label stays, engagement beside it
    (-0.05, "contradicted"),    # significant the wrong way: never hidden either
])
def test_not_engaged_only_where_the_interval_includes_the_null(mean, label):
    a, b = values(mean)
    assert judge(DIRECTION, a, b, not_engaged=WHY)["verdict"] == label
    if label != "not engaged":
        assert judge(DIRECTION, a, b)["verdict"] == label


def test_the_null_at_the_intervals_edge_counts_as_included():
    direction, spread = claim_kind("direction"), claim_kind("spread")
    assert direction.includes_null({}, 0.0, 0.3) and direction.includes_null({}, -1, 0.0)
    assert not direction.includes_null({}, 1e-12, 0.3)
    assert spread.includes_null({}, 0.5, 1.0) and not spread.includes_null({}, 1.01, 2)
    bound = {"bound": 0.8}
    assert claim_kind("threshold").includes_null(bound, 0.7, 0.8) and not claim_kind(
        "threshold").includes_null(bound, 0.5, 0.79)
    assert claim_kind("equivalence").includes_null({"margin": 0.1}, -0.01, 0.01)


def test_an_equivalence_claim_below_the_floor_is_never_evidence():
    claim = {"kind": "equivalence", "margin": 0.1}
    a, b = values(0.0, sd=0.001)
    assert judge(claim, a, b)["verdict"] == "holds"
    assert judge(claim, a, b, not_engaged=WHY)["verdict"] == "not engaged"


def test_a_spread_claim_keeps_a_significant_ratio():
    claim = {"kind": "spread", "expect": "lower", "min_effect": 0.5}
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 0.01, 12), rng.normal(0, 1.0, 12)
    assert judge(claim, a, b, not_engaged=WHY)["verdict"] == "holds"
    assert judge(claim, -b, b, not_engaged=WHY)["verdict"] == "not engaged"  # ratio 1


def engagement(vals, floor=0.01):
    v = np.asarray(vals, dtype=float)
    point, lo, hi, _ = claim_kind("direction").interval({}, v, np.zeros_like(v))
    return {"metric": "shadow/b/weight_tv", "comparator": "b", "value": point,
            "ci": [lo, hi], "floor": floor}


def test_the_floor_reads_the_upper_bound_not_the_mean():
    assert below_floor(engagement([0.001, 0.002, 0.0015, 0.001, 0.002])) is not None
    # mean 0.0064 under the floor, but the seeds spread: the upper bound is above it
    assert below_floor(engagement([0.0, 0.0, 0.0, 0.0, 0.032])) is None
    assert below_floor(engagement([0.02] * 5)) is None
    exact = engagement([0.01] * 5)  # upper bound == floor: not below it
    assert exact["ci"][1] == 0.01 and below_floor(exact) is None
    assert below_floor({"status": "not measured", "reason": "x"}) is None


def test_a_report_card_says_why_engagement_was_not_measured():
    from lmpo.experiments.report.claim_table import card, shown_engagement

    reason = "the arms also differ in kl.coef, which no same-batch comparator replays"
    c = {"claim": "m: a > b", "sentence": "a beats b", "kind": "direction", "metric": "m",
         "n": 5, "effect": 0.1, "ci": [0.0, 0.2], "verdict": "holds", "p": 0.01,
         "p_adj": 0.01, "method": "paired t", "mde": 0.05,
         "engagement": {"status": "not measured", "reason": reason}}
    assert f"- engagement: not measured ({reason})" in card(1, c)
    assert shown_engagement(c) == "not measured"  # the tables keep it short
    measured = dict(c, engagement={"metric": "engagement/weight_tv", "value": 0.2,
                                   "ci": [0.1, 0.3], "floor": 0.001})
    assert "- engagement: weight_tv 0.200 [0.100, 0.300] (floor 0.001)" in card(1, measured)


def test_labels_come_from_the_step_down():
    """Three claims: the weakest is significant alone (p ~ 0.03) but not after Holm's
    step-down over the family, so it is labelled from its adjusted p, beside the interval
    at the level where the step-down stopped."""
    a, b = values(0.02, sd=0.015)
    alone = judge(DIRECTION, a, b)
    assert alone["ci"][0] > 0 and alone["verdict"] == "holds" and alone["p_adj"] == alone["p"]
    ps = [1e-6, 1e-5, alone["p"]]
    alphas = step_down_alphas(ps)
    assert alphas == pytest.approx([0.05 / 3, 0.05 / 2, 0.05])  # all three rejected
    ps = [alone["p"], 0.2, 0.3]  # the first is not rejected: every claim reads alpha / 3
    alphas, adjusted = step_down_alphas(ps), holm_adjust(ps)
    assert alphas == pytest.approx([0.05 / 3] * 3) and adjusted[0] == pytest.approx(3 * ps[0])
    r = judge(DIRECTION, a, b, alpha=alphas[0], p_adj=adjusted[0])
    assert r["ci"] == alone["ci"] and r["ci_holm"][0] < 0 < r["ci"][0]
    assert r["verdict"] == "negligible" and r["p_adj"] > 0.05  # inside +-min_effect 0.05
    assert r["mde"] > alone["mde"]  # the MDE at the labelling level
    strict = judge(DIRECTION | {"min_effect": 0.03}, a, b, alpha=alphas[0], p_adj=adjusted[0])
    assert alone["mde"] < 0.03 < strict["mde"]
    assert strict["verdict"] == "underpowered" and strict["first"] == "direction only"
    assert strict["unadjusted"] == pytest.approx([alone["effect"], *alone["ci"]])
    assert math.isnan(holm_adjust([math.nan, 0.01])[0]) and holm_adjust([math.nan, 0.01])[1] \
        == 0.01


def test_mediators_are_declared_per_claim_and_the_effective_step_is_the_update_norm():
    """One rule for every part kind: an estimator declares no mediator by kind (EBPO's larger
    mean |A| is a confound unless the claim `expects:` it); the gradient's norm and the
    share of steps gradient-norm clipping rescaled are shown, never flagged (AdamW largely
    cancels them), the update's norm after the optimiser is; rows that never logged the
    update norm leave it "not measured"; unequal optimiser steps always count."""
    from lmpo.experiments.stats.seeds import SHOWN, unmeasured

    ebpo = {"advantage.name": "ebpo", "loss.name": "ppo_clip"}
    grpo = {"advantage.name": "grpo", "loss.name": "ppo_clip"}
    dr = {"advantage.name": "dr_grpo", "loss.name": "ppo_clip"}
    assert part_mediators(dr, grpo) == []  # nothing by kind: an estimator declares its own
    assert part_mediators(ebpo, grpo) == ["adv_abs_mean"]  # EBPO's shrunk baseline
    means = {"ebpo": {"adv_abs_mean": 0.68, "step_norm": 0.2, "optim_steps": 100.0,
                      "reward_range": 1.0, "update_norm": 0.01},
             "grpo": {"adv_abs_mean": 0.22, "step_norm": 0.2, "optim_steps": 100.0,
                      "reward_range": 1.0, "update_norm": 0.01}}
    pair = [("ebpo", "grpo")]
    assert effective_flags(pair, means, ["adv_abs_mean"]) == []
    assert effective_flags(pair, means, [])[0].startswith("adv_abs_mean")
    means["ebpo"] |= {"step_norm": 0.5, "grad_clip_share": 0.9, "optim_steps": 200.0,
                      "reward_range": 2.0}
    means["grpo"] |= {"grad_clip_share": 0.1}
    assert set(SHOWN) == {"step_norm", "grad_clip_share"}
    flags = effective_flags(pair, means, ["adv_abs_mean", "optim_steps"])
    assert [f.split(" ")[0] for f in flags] == ["reward_range", "optim_steps"]
    means["ebpo"]["update_norm"] = 0.02  # twice the step: the effective step differs
    flags = effective_flags(pair, means, ["adv_abs_mean", "reward_range"])
    assert [f.split(" ")[0] for f in flags] == ["update_norm", "optim_steps"]
    assert effective_flags(pair, means, ["adv_abs_mean", "reward_range", "update_norm"]) \
        == ["optim_steps = 200 (ebpo) vs 100 (grpo)"]
    assert unmeasured(pair, means, []) == ["update_share", "rollout_tokens"]
    del means["grpo"]["update_norm"]
    assert "update_norm" in unmeasured(pair, means, [])
    assert "update_norm" not in unmeasured(pair, means, ["update_norm"])
    assert not any(f.startswith("update_norm") for f in effective_flags(pair, means, []))
    stop = {"controller.name": "espo"}
    assert set(part_mediators(stop, {"controller.name": "none"})) == {"rollout_tokens",
                                                                     "update_share"}
    assert part_mediators({"rollout.dynamic_sampling": True},
                          {"rollout.dynamic_sampling": False}) == ["update_share",
                                                                   "rollout_tokens"]
    assert "optim_steps" in EFFECTIVE


def test_a_claim_cannot_declare_optimiser_steps_a_mediator():
    from lmpo.experiments.design.spec import parse_experiment

    claim = {"kind": "direction", "metric": "m", "arms": ["a", "b"], "expect": "greater",
             "sentence": "s", "mediators": ["optim_steps"]}
    data = {"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}, "steps": 2,
            "differs_in": [], "claims": [claim]}
    with pytest.raises(ConfigError, match="optim_steps cannot be a mediator"):
        parse_experiment(data, "x", "x.yaml")
    fixed = claim | {"mediators": [], "engaged": [{"arm": "a", "metric": "m", "min": 0.1}]}
    with pytest.raises(ConfigError, match="needs its source"):
        parse_experiment(data | {"claims": [fixed]}, "x", "x.yaml")


def test_the_default_floor_is_the_committed_calibrations():
    """experiments/engagement_floor.py's result: the negative control exactly at 0, the
    positive control moving the parameter gradient, and the default no higher than the
    floor its rule gives."""
    from pathlib import Path

    from lmpo.experiments.report.engagement import DEFAULT_FLOOR

    root = Path(__file__).resolve().parents[1]
    cal = json.loads((root / "experiments/results/engagement_floor.json").read_text())
    assert cal["negative_control_exact"]
    for condition in cal["conditions"].values():
        assert all(t == 0.0 for t, _ in condition["same"]["points"])
        assert condition["reinforce"]["one_minus_cos_max"] > 0
    assert 0 < DEFAULT_FLOOR <= cal["calibration"]["floor"]
    limit = cal["calibration"]["limit_1_minus_cos"]
    below = [d for c in cal["conditions"].values() for name, v in c.items() if name != "same"
             for t, d in v["points"] if t <= cal["calibration"]["floor"]]
    assert below and max(below) < limit  # the rule holds on the committed points


# ---------------------------------------------------------------- a condition axis
DOSES = {"L0": 0.0, "L1": 2.0, "L2": 4.0}
SEEDS = [0, 1, 2, 3, 4]
NOISE = [0.01, -0.02, 0.0, 0.02, -0.01]


def synthetic_sweep(tmp_path, tiny_policy_dir):
    """A compare directory whose rows are written by hand: at dose d, seed s, the effect
    metric(a) - metric(b) is 0.1 d + noise_s; a's runs log the comparator distance
    0.0005 at L0 (below the floor) and 0.05 d above it."""
    data = {"base": {"policy": str(tiny_policy_dir), "log": {"tensorboard": False}},
            "arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"}},
            "seeds": SEEDS, "steps": 3, "differs_in": ["loss"],
            "conditions": {"axis": "staleness", "levels": {
                lv: {"dose": d} | ({"rollout": {"staleness": int(d)}} if d else {})
                for lv, d in DOSES.items()}},
            "claims": [
                {"kind": "direction", "metric": "reward/mean", "reduce": "last_k", "k": 2,
                 "arms": ["a", "b"], "expect": "greater", "sentence": "a above b",
                 "at": "L0", "min_effect": 0.05},
                {"kind": "dose_response", "metric": "reward/mean", "reduce": "last_k", "k": 2,
                 "arms": ["a", "b"], "expect": "greater", "sentence": "the gap grows",
                 "min_effect": 0.1, "x": "rollout/logp_mismatch"}]}
    def rows(run):
        arm, level = run.arm.split("@")
        dose = DOSES[level]
        value = 1.0 + (0.1 * dose + NOISE[run.seed] if arm == "a" else 0.0)
        shadow = {"shadow/b/weight_tv": 0.0005 if dose == 0 else 0.05 * dose} \
            if arm == "a" else {}
        return [{"step": t, "reward/mean": value, "rollout/logp_mismatch": 0.5 * dose} | shadow
                for t in (1, 2, 3)]

    return hand_written_sweep(tmp_path, data, rows)


def test_a_dose_response_claim_renders_with_its_plot(tmp_path, tiny_policy_dir):
    from lmpo.experiments.report.write import report

    out = synthetic_sweep(tmp_path, tiny_policy_dir)
    assert sorted(p.name for p in (out / "runs").iterdir()) == [
        "a@L0", "a@L1", "a@L2", "b@L0", "b@L1", "b@L2"]
    cfg = yaml.safe_load((out / "configs" / "a@L1-seed0.yaml").read_text())
    assert set(cfg["log"]["comparators"]["b"]) == {"loss"}  # b's loss, on a's batches
    assert cfg["rollout"]["staleness"] == 2
    assert not yaml.safe_load((out / "configs/b@L1-seed0.yaml").read_text())["log"][
        "comparators"]
    md = report(out)
    rep = json.loads(md.with_suffix(".json").read_text())
    assert rep["schema_version"] == 4 and rep["setup"]["conditions"]["doses"] == DOSES
    at_l0, trend = rep["claims"]
    assert at_l0["level"] == "L0" and at_l0["role"] == "headline"
    assert at_l0["engagement"]["value"] == pytest.approx(0.0005)
    assert at_l0["verdict"] == "not engaged"  # effect ~0 with an interval across it
    assert trend["kind"] == "dose_response" and trend["role"] == "headline"
    assert trend["slope_per_dose"] == pytest.approx(0.1, abs=1e-9)
    assert trend["effect"] == pytest.approx(0.4, abs=1e-9)  # 0.1 x the range 4
    assert trend["verdict"] == "holds"
    levels = {lv["level"]: lv for lv in trend["levels"]}
    assert levels["L2"]["effect"] == pytest.approx(0.4) and levels["L2"]["x"] == 2.0
    assert levels["L1"]["engagement"]["value"] == pytest.approx(0.1)
    top = max(levels.values(), key=lambda lv: lv["engagement"]["value"])  # per level, and
    assert trend["engagement"]["at"] == top["level"]  # the highest in the claim's line
    assert "verdict" not in top  # one label per comparison: the level rows carry none
    assert "dose_0.png" in rep["plots"] and (out / "dose_0.png").stat().st_size > 1000
    text = md.read_text()
    assert "#### Per level (descriptive)" in text and "| L2 | 4.00 | 2.00 | +0.400" in text
    assert "| L0 | 0 | 0 | 0 [" in text and "not engaged (claim 1) |" in text


def test_an_arm_may_run_at_some_levels_only():
    """An ablation run at L0 and the highest level alone: its runs exist there only, a claim
    defaults to the levels its arms share, and a dose_response claim reads those levels."""
    from lmpo.experiments.design.spec import parse_experiment

    levels = {lv: {"dose": d} | ({"rollout": {"staleness": int(d)}} if d else {})
              for lv, d in DOSES.items()}
    claims = [{"kind": "direction", "metric": "m", "arms": ["a", "c"], "expect": "greater",
               "sentence": "s", "min_effect": 0.1},
              {"kind": "dose_response", "metric": "m", "arms": ["c", "b"], "expect": "greater",
               "sentence": "s", "min_effect": 0.1}]
    data = {"arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"},
                     "c": {"preset": "cegppo", "levels": ["L0", "L2"],
                           "overrides": {"loss": {"hparams": {"beta1": 1.0}}}}},
            "steps": 1, "differs_in": ["loss"], "claims": claims,
            "conditions": {"axis": "staleness", "levels": levels}}
    exp = parse_experiment(data, "x", "x")
    assert exp.to_dict()["arms"]["c"]["levels"] == ["L0", "L2"]
    flat = exp.expand()
    assert [a.name for a in flat.arms] == ["a@L0", "b@L0", "c@L0", "a@L1", "b@L1",
                                           "a@L2", "b@L2", "c@L2"]
    assert [c["arms"] for c in flat.claims if c["kind"] == "direction"] == [
        ["a@L0", "c@L0"], ["a@L2", "c@L2"]]
    [trend] = [c for c in flat.claims if c["kind"] == "dose_response"]
    assert trend["by_level"] == {"L0": ["c@L0", "b@L0"], "L2": ["c@L2", "b@L2"]}
    with pytest.raises(ConfigError, match=r"do not all run at \['L1'\]"):
        parse_experiment(data | {"claims": [claims[0] | {"at": "L1"}]}, "x", "x")
    via_c = data | {"claims": [claims[0] | {"arms": ["a", "b"], "comparator": "c"}]}
    assert [c["level"] for c in parse_experiment(via_c, "x", "x").expand().claims] == [
        "L0", "L2"]  # its comparator runs at L0 and L2 alone
    for levels_given in (["L3"], [], ["L0", "L0"], "L0"):
        bad = data | {"arms": data["arms"] | {"c": {"preset": "cegppo",
                                                    "levels": levels_given}}}
        with pytest.raises(ConfigError, match="levels must list distinct levels"):
            parse_experiment(bad, "x", "x")
    one = data | {"arms": data["arms"] | {"c": {"preset": "cegppo", "levels": ["L1"]}},
                  "claims": [claims[1]]}
    with pytest.raises(ConfigError, match="must share >= 2 levels; they share"):
        parse_experiment(one, "x", "x")
    plain = {k: v for k, v in data.items() if k != "conditions"} | {"claims": []}
    with pytest.raises(ConfigError, match=r"conditions \(none\)"):
        parse_experiment(plain, "x", "x")
