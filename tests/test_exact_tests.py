"""The exact tests beside the paired t: the sign-flip p equals an enumeration of every sign
pattern in exact rational arithmetic (and scipy's permutation test), the signed-rank p
equals the enumerated exact distribution (and scipy's wilcoxon), the smallest attainable p
is 2 / 2^n, and a disagreement with the t-based label is flagged only where the exact test
could reach the label's level."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from lmpo.experiments.report.claim_table import exact_text
from lmpo.experiments.stats.exact import exact_check, min_p, sign_flip_p, wilcoxon_p
from lmpo.experiments.stats.labels import judge


def enumerated_sign_flip(cents: list[int]) -> float:
    """Two-sided p by scipy's convention (twice the smaller one-sided p, at most 1), every
    sign pattern's mean computed exactly."""
    n = len(cents)
    observed = Fraction(sum(cents), n)
    means = [Fraction(sum(s * c for s, c in zip(signs, cents, strict=True)), n)
             for signs in itertools.product((1, -1), repeat=n)]
    greater = sum(m >= observed for m in means) / len(means)
    less = sum(m <= observed for m in means) / len(means)
    return min(1.0, 2 * min(greater, less))


def enumerated_signed_rank(x: list[float]) -> float:
    """Two-sided exact p of Wilcoxon's W+ (no ties, no zeros): every sign pattern of the
    ranks, twice the smaller tail."""
    ranks = sps.rankdata(np.abs(x))
    observed = sum(r for r, v in zip(ranks, x, strict=True) if v > 0)
    ws = [sum(r for r, s in zip(ranks, signs, strict=True) if s > 0)
          for signs in itertools.product((1, -1), repeat=len(x))]
    greater = sum(w >= observed for w in ws) / len(ws)
    less = sum(w <= observed for w in ws) / len(ws)
    return min(1.0, 2 * min(greater, less))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-400, 400), min_size=3, max_size=10))
def test_the_sign_flip_p_is_the_share_of_sign_patterns_as_extreme(cents):
    x = np.array(cents, dtype=float) / 100
    if not any(cents):
        assert sign_flip_p(x) == 1.0
        return
    assert abs(sign_flip_p(x) - enumerated_sign_flip(cents)) < 1e-12
    ref = sps.permutation_test((x,), np.mean, permutation_type="samples",
                               n_resamples=2 ** x.size).pvalue
    assert abs(sign_flip_p(x) - ref) < 1e-12


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=4, max_size=9, unique=True),
       st.lists(st.booleans(), min_size=9, max_size=9))
def test_the_signed_rank_p_is_its_exact_distribution(magnitudes, signs):
    x = [m / 100 * (1 if s else -1) for m, s in zip(magnitudes, signs, strict=False)]
    assert abs(wilcoxon_p(x) - enumerated_signed_rank(x)) < 1e-12
    assert abs(wilcoxon_p(x) - sps.wilcoxon(x).pvalue) < 1e-12


def test_five_seeds_cannot_reach_five_percent():
    assert min_p(5) == 0.0625 and min_p(6) == 0.03125
    x = [0.03, 0.05, 0.01, 0.04, 0.02]  # every seed the same way: the most extreme pattern
    assert sign_flip_p(x) == 0.0625 and wilcoxon_p(x) == 0.0625
    check = exact_check(np.array(x), t_significant=True, alpha=0.05)
    assert not check["attainable"] and not check["disagrees"]  # t says holds; no flag
    assert "cannot reach" in exact_text(check)


def test_a_disagreement_is_flagged_where_the_exact_test_reaches_the_level():
    x = np.array([10.0] + [0.1] * 7)  # one wild seed: t is wide, every sign positive
    assert sps.ttest_1samp(x, 0).pvalue > 0.05 and sign_flip_p(x) == 2 / 2 ** 8
    check = exact_check(x, t_significant=False, alpha=0.05)
    assert check["attainable"] and check["disagrees"]
    assert "disagrees with the t-based label" in exact_text(check)
    assert not exact_check(x, t_significant=True, alpha=0.05)["disagrees"]


def test_a_direction_claim_carries_the_exact_tests_and_keeps_its_label():
    claim = {"kind": "direction", "metric": "m", "arms": ["a", "b"], "expect": "greater",
             "min_effect": 0.01}
    a, b = np.array([0.53, 0.55, 0.51, 0.54, 0.52]), np.full(5, 0.5)
    out = judge(claim, a, b)
    assert out["verdict"] == "holds"  # the t: p 0.0016
    assert out["exact"]["sign_flip_p"] == 0.0625 and not out["exact"]["disagrees"]
    spread = {"kind": "spread", "metric": "m", "arms": ["a", "b"], "expect": "greater"}
    assert "exact" not in judge(spread, a + [0, 0.1, -0.1, 0.2, -0.2], b + 0.001 * np.arange(5))
