"""The statistics of the labels, by simulation and against independent references (seeded,
vectorised): Holm's step-down against statsmodels and a float64 running maximum, family-wise
error under a global null, the shown intervals' coverage, the Pitman-Morgan test and
interval, TOST, agreement of labels and intervals, and the null label's error rate."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps
from statsmodels.stats.multitest import multipletests

from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.labels import judge
from lmpo.experiments.stats.multiplicity import holm_adjust, step_down_alphas
from lmpo.experiments.stats.seeds import pitman_morgan

ALPHA = 0.05
DIRECTION = {"kind": "direction", "expect": "greater", "min_effect": 0.5}


def running_max_holm(ps: np.ndarray) -> np.ndarray:
    """Holm's adjusted p values by the definition, in pure Python: for each claim, the
    largest min(1, (m - k) p(k)) over the claims ranked at or before it."""
    ranked = sorted(range(len(ps)), key=lambda i: (ps[i], i))
    out, top = np.empty(len(ps)), 0.0
    for k, i in enumerate(ranked):
        top = max(top, min(1.0, (len(ps) - k) * float(ps[i])))
        out[i] = top
    return out


p_lists = st.lists(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.01, 0.02, 0.5, 1.0])),
                   min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(p_lists)
def test_the_step_down_equals_statsmodels_and_a_running_maximum(ps):
    """Ties and p = 1 included; the rejections `step_down_alphas` implies are the same set."""
    ps = np.array(ps)
    adjusted = np.array(holm_adjust(list(ps)))
    with mock.patch("gc.collect"):  # multipletests collects garbage on every call
        reference = multipletests(ps, alpha=ALPHA, method="holm")[1]
    np.testing.assert_allclose(adjusted, reference, rtol=0, atol=1e-15)
    np.testing.assert_allclose(adjusted, running_max_holm(ps), rtol=0, atol=1e-15)
    rejected = ps <= np.array(step_down_alphas(list(ps)))
    assert list(rejected) == list(adjusted <= ALPHA)


def test_the_old_rank_level_rule_is_not_the_step_down():
    """p = (0.04, 0.045): the rank levels alpha/2 and alpha reject the second alone (the
    old rule); Holm stops at the first and rejects neither."""
    ps = [0.04, 0.045]
    assert step_down_alphas(ps) == pytest.approx([ALPHA / 2, ALPHA / 2])
    assert holm_adjust(ps) == pytest.approx([0.08, 0.08])


def t_pvalues(d: np.ndarray) -> np.ndarray:
    """Two-sided one-sample t p values over the last axis."""
    n = d.shape[-1]
    t = d.mean(-1) / (d.std(-1, ddof=1) / math.sqrt(n))
    return 2 * sps.t.sf(np.abs(t), n - 1)


@pytest.mark.parametrize("m,n", [(4, 5), (12, 5), (6, 10)])
def test_family_wise_error_under_a_global_null(m, n):
    """4,000 simulated experiments of m claims at n seeds, every effect 0: the share with
    any claim rejected after the step-down is at most alpha + 3 Monte-Carlo sds."""
    rng = np.random.default_rng(m * 100 + n)
    reps = 4000
    ps = t_pvalues(rng.normal(0, 1, (reps, m, n)))
    any_rejected = np.array([(np.array(holm_adjust(list(row))) <= ALPHA).any() for row in ps])
    mc = 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)
    assert any_rejected.mean() <= ALPHA + mc, any_rejected.mean()


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_shown_intervals_cover_at_their_nominal_rate(n):
    """The 95% paired t interval and the labelling interval at alpha / 4 cover the true
    effect at >= their level - 3 MC sds over 4,000 experiments (vectorised)."""
    rng = np.random.default_rng(n)
    reps, true = 4000, 0.3
    d = rng.normal(true, 1.0, (reps, n))
    m, se = d.mean(1), d.std(1, ddof=1) / math.sqrt(n)
    for level in (0.95, 1 - ALPHA / 4):
        half = sps.t.ppf((1 + level) / 2, n - 1) * se
        cover = ((m - half <= true) & (true <= m + half)).mean()
        assert cover >= level - 3 * math.sqrt(level * (1 - level) / reps), (level, cover)
    lo, hi = claim_kind("direction").interval({}, d[0], np.zeros(n))[1:3]  # the code's own interval
    assert (lo, hi) == pytest.approx((m[0] - sps.t.ppf(0.975, n - 1) * se[0],
                                      m[0] + sps.t.ppf(0.975, n - 1) * se[0]))


@pytest.mark.parametrize("n", [5, 10])
def test_the_pitman_morgan_interval_covers_the_std_ratio(n):
    """Correlated arms (rho 0.6), true std ratio 1.5: the interval covers it at >= 95% - 3
    MC sds over 2,000 experiments."""
    rng = np.random.default_rng(20 + n)
    reps, ratio, hits = 2000, 1.5, 0
    cov = [[ratio ** 2, 0.6 * ratio], [0.6 * ratio, 1.0]]
    for _ in range(reps):
        a, b = rng.multivariate_normal([0, 0], cov, n).T
        _, lo, hi = pitman_morgan(a, b)
        hits += lo <= ratio <= hi
    assert hits / reps >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / reps)


def test_pitman_morgan_against_a_hand_computation():
    """p: the t test of corr(a + b, a - b) (df n - 2); the interval's ends are where the
    test of sd(a / sqrt(theta)) = sd(b) has p exactly 1 - level."""
    a = np.array([1.0, 3.0, 2.0, 6.0, 4.0, 7.0])
    b = np.array([2.0, 2.5, 2.0, 3.5, 3.0, 3.0])
    u, v = a + b, a - b
    r = np.corrcoef(u, v)[0, 1]
    t = r * math.sqrt(4 / (1 - r * r))
    p, lo, hi = pitman_morgan(a, b)
    assert p == pytest.approx(2 * sps.t.sf(abs(t), 4), rel=1e-12)
    for end in (lo, hi):
        assert pitman_morgan(a / end, b)[0] == pytest.approx(0.05, rel=1e-9)
    assert lo < a.std(ddof=1) / b.std(ddof=1) < hi


def test_tost_p_is_the_larger_one_sided_p():
    """Differences 0.1, 0.2, 0.3 (mean 0.2, se 0.1/sqrt(3)) against margin 0.5."""
    claim = {"kind": "equivalence", "margin": 0.5}
    d = np.array([0.1, 0.2, 0.3])
    se = 0.1 / math.sqrt(3)
    want = max(sps.t.sf((0.2 + 0.5) / se, 2), sps.t.cdf((0.2 - 0.5) / se, 2))
    p = claim_kind("equivalence").p_value(claim, d, np.zeros(3))
    assert p == pytest.approx(want, rel=1e-12)
    r = judge(claim, d, np.zeros(3), alpha=want)  # at alpha = p: the interval touches
    assert r["ci_holm"][1] == pytest.approx(0.5, rel=1e-9)


def test_labels_agree_with_the_interval_beside_them():
    """Random families of direction claims: "holds"/"contradicted" exactly where the
    interval at the step-down's level excludes 0."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        m, n = rng.integers(1, 8), rng.integers(3, 12)
        values = rng.normal(rng.normal(0, 0.7, (m, 1)), 1.0, (m, n))
        ps = [claim_kind("direction").p_value(DIRECTION, x, np.zeros(n)) for x in values]
        alphas, adjusted = step_down_alphas(ps), holm_adjust(ps)
        for x, alpha, q in zip(values, alphas, adjusted, strict=True):
            r = judge(DIRECTION | {"min_effect": 100.0}, x, np.zeros(n), alpha=alpha, p_adj=q)
            lo, hi = r["ci_holm"]
            assert (r["verdict"] in ("holds", "contradicted")) == (lo > 0 or hi < 0)


def test_the_null_label_is_rare_when_the_effect_is_exactly_min_effect():
    """True effect = min_effect: "negligible" (the labelling interval inside +-min_effect)
    in at most alpha of 4,000 experiments at n = 5."""
    rng = np.random.default_rng(3)
    reps, n, delta = 4000, 5, 0.5
    d = rng.normal(delta, 1.0, (reps, n))
    m, se = d.mean(1), d.std(1, ddof=1) / math.sqrt(n)
    half = sps.t.ppf(0.975, n - 1) * se
    negligible = (m - half > -delta) & (m + half < delta)
    assert negligible.mean() <= ALPHA
    labels = [judge(DIRECTION, x, np.zeros(n))["verdict"] for x in d[:300]]
    assert sum(v == "negligible" for v in labels) == int(negligible[:300].sum())


def test_a_hypothesis_two_rows_carry_is_counted_once_in_its_family():
    """DRPO - IS-PG as DRPO > GRPO's mechanism part and as a claim of its own: one
    hypothesis in the descriptive family (m = 2, not 3), both rows given its levels."""
    from lmpo.experiments.stats.multiplicity import family_levels

    rows = [("descriptive", 0.01), ("descriptive", 0.01), ("descriptive", 0.04),
            ("headline", 0.01)]
    once = family_levels(rows, ["drpo-is_pg", "drpo-is_pg", "is_pg-grpo", "drpo-is_pg"])
    assert [x[:2] for x in once] == [pytest.approx((0.025, 0.02))] * 2 + [
        pytest.approx((0.05, 0.04)), pytest.approx((0.05, 0.01))]  # another family: again
    assert once[0][2] == {"family": "descriptive", "family_size": 2}
    twice = family_levels(rows)  # without keys every row is its own hypothesis
    assert twice[0][:2] == pytest.approx((0.05 / 3, 0.03)) and twice[0][2]["family_size"] == 3
