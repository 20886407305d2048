"""The verdict rules (`lmpo.experiments.stats.seeds`) on synthetic per-seed values, no training:
every label at its boundary next to its clean counterpart, intervals that cover at their
nominal rate, an MDE that is detected 80% of the time, the audits' order, Holm's levels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import parse_experiment
from lmpo.experiments.report.audit import config_confounds, judge_claims
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.labels import evaluate_claim, judge
from lmpo.experiments.stats.seeds import EFFECTIVE, effective_flags, power_ncp


def claim(kind, **kw):
    base = {"kind": kind, "metric": "m", "arms": ["a", "b"], "sentence": "s"}
    return base | kw


A = [0.5, 0.75, 0.25, 1.0]  # dyadic values: sums and differences below are exact


# ---------------------------------------------------------------- verdicts from intervals
@pytest.mark.parametrize("d,expect,verdict", [
    (0.125, "greater", "holds"), (0.0, "greater", "inconclusive"),
    (-0.125, "greater", "contradicted"), (-0.125, "less", "holds"),
    (0.125, "less", "contradicted")])
def test_direction_verdicts_at_their_boundaries(d, expect, verdict):
    """A constant paired difference d: its sd is 0, so the t interval is exactly [d, d]."""
    r = evaluate_claim(claim("direction", expect=expect), [x + d for x in A], A)
    assert r["effect"] == pytest.approx(d) and r["ci"] == pytest.approx([d, d])
    assert r["verdict"] == verdict and r["method"] == "paired t"


def test_the_paired_t_interval_equals_a_hand_computation():
    """Differences 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653 (a table value)."""
    r = evaluate_claim(claim("direction", expect="greater"), [1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    half = 4.302653 / math.sqrt(3)
    assert r["ci"] == pytest.approx([2 - half, 2 + half], rel=1e-6)
    assert r["verdict"] == "direction only"  # the interval reaches below 0


def test_direction_only_and_inconclusive_when_the_ci_includes_zero():
    b = [0.5, 0.5, 0.5, 0.5]
    a = [0.8, 0.3, 0.7, 0.4]  # differences +0.3 -0.2 +0.2 -0.1: mean +0.05, CI spans 0
    r = evaluate_claim(claim("direction", expect="greater"), a, b)
    assert r["ci"][0] < 0 < r["ci"][1] and r["verdict"] == "direction only"
    assert evaluate_claim(claim("direction", expect="less"), a, b)["verdict"] == "inconclusive"


@pytest.mark.parametrize("ratio,verdict", [(0.75, "holds"), (0.7501, "not met"),
                                           (0.5, "holds")])
def test_threshold_verdicts_at_the_bound(ratio, verdict):
    """b = ratio * a exactly: every seed's ratio equals `ratio`; at the bound it holds."""
    c = claim("threshold", statistic="ratio", bound=0.75, expect="below")
    a = [4.0, 8.0, 16.0, 12.0]
    r = evaluate_claim(c, a, [x * ratio for x in a])
    assert r["effect"] == pytest.approx(ratio) and r["verdict"] == verdict


def test_threshold_direction_only_and_above():
    a = [100.0, 100.0, 100.0, 100.0]
    b = [70.0, 95.0, 60.0, 85.0]  # ratio 0.775 <= 0.8, but the CI reaches above 0.8
    c = claim("threshold", statistic="ratio", bound=0.8, expect="below")
    r = evaluate_claim(c, a, b)
    assert r["effect"] == pytest.approx(0.775) and r["ci"][1] > 0.8
    assert r["verdict"] == "direction only"
    up = claim("threshold", statistic="difference", bound=-20, expect="above")
    r = evaluate_claim(up, a, b)  # b - a = -22.5: the point fails ">= -20"
    assert r["effect"] == pytest.approx(-22.5) and r["verdict"] == "not met"


@pytest.mark.parametrize("d,verdict", [(0.0625, "holds"), (0.0626, "contradicted"),
                                       (-0.0625, "holds"), (0.0, "holds"),
                                       (-0.0626, "contradicted")])
def test_equivalence_verdicts_at_the_margin(d, verdict):
    """Every seed's difference is d (a zero-width interval): within the margin it holds,
    wholly outside it the equivalence is contradicted."""
    r = evaluate_claim(claim("equivalence", margin=0.0625), [x + d for x in A], A)
    assert r["verdict"] == verdict


def test_an_equivalence_interval_across_the_margin_is_not_shown():
    diffs = [0.05, 0.1, 0.15, 0.0]  # mean 0.075, the interval spans 0.0625
    r = evaluate_claim(claim("equivalence", margin=0.0625), diffs, [0.0] * 4)
    assert r["ci"][0] < 0.0625 < r["ci"][1] and r.get("first", r["verdict"]) == "not shown"


@pytest.mark.parametrize("ratio,verdict", [(1.25, "holds"), (1.2501, "contradicted"),
                                           (0.75, "holds"), (0.7499, "contradicted")])
def test_relative_equivalence_at_the_margin(ratio, verdict):
    c = claim("equivalence", margin=0.25, statistic="ratio")
    r = evaluate_claim(c, [ratio * x for x in A], A)
    assert r["effect"] == pytest.approx(ratio - 1) and r["verdict"] == verdict


def test_a_threshold_on_one_arms_value():
    c = claim("threshold", statistic="value", bound=0.125, expect="below", arms=["a"])
    assert evaluate_claim(c, [0.125] * 3)["verdict"] == "holds"  # CI [0.125, 0.125]
    r = evaluate_claim(c, [0.0625, 0.0625, 0.25, 0.125])  # mean 0.125, the CI reaches 0.26
    assert r["effect"] == 0.125 and r["ci"][1] > 0.125
    assert r["verdict"] == "direction only"
    assert evaluate_claim(c, [0.25, 0.5, 0.25])["verdict"] == "not met"


@pytest.mark.parametrize("scale,expect,verdict", [(0.5, "lower", "holds"),
                                                  (2.0, "lower", "contradicted"),
                                                  (2.0, "higher", "holds")])
def test_spread_verdicts(scale, expect, verdict):
    """a = scale * b around a common mean: std(a)/std(b) = scale in every resample."""
    b = np.array(A)
    a = 0.625 + scale * (b - b.mean())
    r = evaluate_claim(claim("spread", expect=expect), a, b)
    assert r["effect"] == pytest.approx(scale) and r["verdict"] == verdict
    assert r["method"] == "Pitman-Morgan" and r["ci"] == pytest.approx([scale, scale])


def test_fewer_than_three_seeds_is_insufficient():
    for kind, kw in [("direction", {"expect": "greater"}), ("equivalence", {"margin": 1}),
                     ("spread", {"expect": "lower"}),
                     ("threshold", {"statistic": "ratio", "bound": 1, "expect": "below"})]:
        assert evaluate_claim(claim(kind, **kw), [1.0, 2.0], [0.5, 0.7])["verdict"] == \
            "insufficient seeds"


def test_every_seed_count_uses_the_paired_t_interval():
    """No bootstrap: the interval is the inversion of the claim's own t test at any n."""
    rng = np.random.default_rng(0)
    for n in (3, 9, 10, 15):
        a, b = rng.normal(1, 1, n), rng.normal(0, 1, n)
        r = evaluate_claim(claim("direction", expect="greater"), a, b)
        assert r["method"] == "paired t"
        assert r["ci"] == pytest.approx(list(claim_kind("direction").interval({}, a, b)[1:3]))


# ---------------------------------------------------------------- coverage and power
@pytest.mark.parametrize("n", [3, 5])
def test_the_t_interval_covers_at_its_nominal_rate(n):
    """4,000 normal experiments: the 95% paired t interval covers the true mean 95 +- 1.5%
    of the time at n = 3 and 5 (a percentile bootstrap covers ~75% and ~84%)."""
    rng = np.random.default_rng(n)
    c = claim("direction", expect="greater")
    hits = 0
    for _ in range(4000):
        d = rng.normal(0.3, 1.0, size=n)
        _, lo, hi, _ = claim_kind("direction").interval(c, d, np.zeros(n))
        hits += lo <= 0.3 <= hi
    assert abs(hits / 4000 - 0.95) <= 0.015, hits / 4000


@pytest.mark.parametrize("n", [3, 5])
def test_a_true_effect_at_the_mde_is_detected_80_percent_of_the_time(n):
    """The per-seed sd is 1; an effect equal to the MDE it implies is judged "holds" in
    80 +- 5% of 4,000 simulated experiments (and at half the MDE far less often)."""
    rng = np.random.default_rng(10 + n)
    c = claim("direction", expect="greater")
    effect = claim_kind("direction").mde_for("greater", 1.0, n)
    assert effect == pytest.approx(power_ncp(n - 1) / math.sqrt(n))

    def rate(delta):
        holds = 0
        for _ in range(4000):
            d = rng.normal(delta, 1.0, size=n)
            _, lo, _, _ = claim_kind("direction").interval(c, d, np.zeros(n))
            holds += lo > 0
        return holds / 4000

    assert abs(rate(effect) - 0.80) <= 0.05
    assert rate(effect / 2) < 0.5


def test_the_spread_mde_is_the_ratio_the_paired_test_resolves():
    """Pitman-Morgan's MDE: none below 4 seeds (Fisher's z needs n - 3 > 0), far from 1
    at 5 seeds, tightening with n and with the arms' correlation; 'lower' mirrors 'higher'."""
    spread = claim_kind("spread")
    assert math.isinf(spread.mde_for("higher", 0, 3))
    hi5, hi10 = spread.mde_for("higher", 0, 5), spread.mde_for("higher", 0, 10)
    assert hi5 > hi10 > 1
    assert claim_kind("spread").mde_for("lower", 0, 10) == pytest.approx(1 / hi10)
    assert claim_kind("spread").mde_for("higher", 0, 10, r=0.9) < hi10


# ---------------------------------------------------------------- power, audits, order
NOISY = ([0.3, -0.2, 0.2, -0.1, 0.05], [0.0] * 5)  # mean +0.05, sd ~0.2: MDE ~0.35


@pytest.mark.parametrize("min_effect,verdict", [(0.1, "underpowered"), (1.0, "negligible"),
                                                (None, "direction only")])
def test_underpowered_or_negligible_replace_a_weak_verdict(
        min_effect, verdict):
    c = claim("direction", expect="greater") | ({"min_effect": min_effect}
                                                if min_effect else {})
    r = judge(c, *NOISY)
    assert r["verdict"] == verdict and r["mde"] == pytest.approx(
        claim_kind("direction").mde_for("greater", float(np.std(NOISY[0], ddof=1)), 5))
    if verdict == "underpowered":
        assert r["reason"] == f"MDE {r['mde']:.3g} > min_effect 0.1" and \
            r["first"] == "direction only"


def test_a_significant_result_keeps_its_label_with_its_mde():
    c = claim("direction", expect="greater", min_effect=1e-6)
    r = judge(c, [x + 0.125 for x in A], A)  # exact: sd 0, MDE 0
    assert r["verdict"] == "holds" and r["mde"] == 0.0
    c = claim("direction", expect="greater", min_effect=0.01)  # MDE > min_effect
    a = [1.0, 1.2, 0.9, 1.1, 1.05]
    r = judge(c, a, [0.0] * 5)
    assert r["verdict"] == "holds" and r["mde"] > 0.01


def test_equivalence_is_underpowered_when_its_interval_is_wider_than_the_margin():
    c = claim("equivalence", margin=0.1)
    r = judge(c, *NOISY)
    assert r["verdict"] == "underpowered" and r["mde"] > 0.1
    assert judge(c | {"margin": 1.0}, *NOISY)["verdict"] == "holds"


def test_the_audits_come_first_in_their_order():
    c = claim("direction", expect="greater", min_effect=0.1)
    assert judge(c, *NOISY, confounded="config: loss.agg", not_engaged="x")["verdict"] == \
        "confounded"
    r = judge(c, *NOISY, not_engaged="a: m = 0 vs min 0.05")
    assert r["verdict"] == "not engaged" and r["reason"] == "a: m = 0 vs min 0.05"
    assert judge(c, *NOISY)["verdict"] == "underpowered"  # the clean counterpart
    assert judge(claim("direction", expect="greater"), [1.0], [0.0],
                 confounded="config: x")["verdict"] == "insufficient seeds"


@pytest.mark.parametrize("u,v,flagged", [(1.0, 1.5, False), (1.0, 1.51, True),
                                         (0.0, 0.0, False), (0.0, 0.1, True)])
def test_a_norm_or_count_differs_beyond_a_ratio_of_1_5(u, v, flagged):
    q = {"a": {"update_norm": u}, "b": {"update_norm": v}}
    flags = effective_flags([("a", "b")], q, expects=[])
    assert bool(flags) == flagged
    assert not effective_flags([("a", "b")], q, expects=["update_norm"])
    if flagged:
        assert flags[0].startswith("update_norm = ")


@pytest.mark.parametrize("u,v,flagged", [(0.1, 0.3, False), (0.1, 0.31, True)])
def test_a_share_differs_beyond_0_2_absolute(u, v, flagged):
    q = {"a": {"update_share": u}, "b": {"update_share": v}}
    assert bool(effective_flags([("a", "b")], q, expects=[])) == flagged
    assert not effective_flags([("a", "b")], q, [], tolerance={"share": 0.5})


def test_config_confounds_match_by_prefix_and_never_count_seed_threads_log_imports():
    flats = {"a": {"loss.name": "x", "loss.agg": "m1", "advantage.name": "grpo", "seed": 0,
                   "log.eval_every": 5, "imports": ["a.py"], "threads": 1},
             "b": {"loss.name": "y", "loss.agg": "m2", "advantage.name": "dr_grpo",
                   "seed": 1, "log.eval_every": 9, "imports": [], "threads": 2}}
    c = claim("direction", expect="greater")
    assert config_confounds(c, ["loss"], flats) == ["advantage.name"]
    assert config_confounds(c | {"differs_in": ["loss.name"]}, ["loss"], flats) == [
        "advantage.name", "loss.agg"]
    assert config_confounds(c, ["loss", "advantage"], flats) == []


def test_claim_fields_are_checked_before_any_run():
    arms = {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}
    for extra, msg in [({"expects": ["tokens"]}, "mediators name unknown quantities"),
                       ({"mediators": ["tokens"]}, "mediators name unknown quantities"),
                       ({"engaged": [{"arm": "c", "metric": "m", "min": 1}]}, "unknown arm"),
                       ({"engaged": [{"arm": "a", "metric": "m", "min": 1}]}, "its source"),
                       ({"engaged": [{"arm": "a", "metric": "m", "source": "s"}]},
                        "exactly one of min"),
                       ({"comparator": "c"}, "comparator must name an arm"),
                       ({"engaged_floor": 1.5}, r"engaged_floor must be a number in \(0, 1\)"),
                       ({"at": "L0"}, "`at` needs the experiment's conditions"),
                       ({"min_effect": -1}, "min_effect must be a number > 0"),
                       ({"differs_in": "loss"}, "differs_in must be a list")]:
        with pytest.raises(ConfigError, match=msg):
            parse_experiment({"arms": arms, "steps": 1, "differs_in": [], "claims": [
                claim("direction", expect="greater") | extra]}, "x", "x")
    assert set(EFFECTIVE) >= {"update_norm", "grad_clip_share", "step_norm", "update_share",
                              "rollout_tokens", "reward_range", "adv_abs_mean", "optim_steps"}


def test_a_comparison_of_gains_pairs_each_difference_within_a_seed():
    """(a - b) - (c - d) per seed: the gain at G=2 (0.25 in every seed) exceeds the gain at
    G=8 (0.125), although the arms' own values vary a lot between seeds."""
    c = claim("direction", expect="greater", arms=["e2", "g2", "e8", "g8"])
    exp = parse_experiment({"arms": {a: {"preset": "grpo"} for a in ("e2", "g2", "e8", "g8")},
                            "steps": 1, "seeds": 3, "differs_in": [], "claims": [c]}, "x", "x")
    base = {0: 0.25, 1: 0.75, 2: 0.5}
    value = {"g2": 0.0, "e2": 0.25, "g8": 0.125, "e8": 0.25}
    runs = {(a, s): {"finished": True, "rows": [{"step": 1, "m": base[s] + v}]}
            for a, v in value.items() for s in base}
    [r] = judge_claims({"experiment": exp, "runs": runs})
    assert r["claim"] == "m: (e2 - g2) > (e8 - g8)" and r["seeds"] == [0, 1, 2]
    assert r["effect"] == 0.125 and r["ci"] == [0.125, 0.125] and r["verdict"] == "holds"
    with pytest.raises(ConfigError, match="a comparison of gains names four arms"):
        parse_experiment({"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}},
                          "steps": 1, "differs_in": [],
                          "claims": [claim("direction", expect="less",
                                           arms=["a", "a", "a", "b"])]}, "x", "x")
