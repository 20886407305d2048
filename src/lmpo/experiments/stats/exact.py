"""Exact small-sample tests beside the paired t: a claim on 5 seeds rests on the t
distribution's tails, which a skewed per-seed difference may not follow.

- The sign-flip permutation test of the paired differences (`sign_flip_p`): under the null
  of no effect each seed's difference is as likely to have either sign; its p is the
  share of the 2^n sign patterns whose mean is at least as extreme (exact up to n = 16,
  Monte Carlo with a fixed seed beyond). scipy's `permutation_test` computes it.
- The Wilcoxon signed-rank test (`scipy.stats.wilcoxon`), exact at these seed counts.

Neither can give a p below `min_p(n)` = 2 / 2^n two-sided (0.0625 at n = 5): at 5 seeds
no exact test reaches 0.05, whatever the data. A claim card prints both p values and the
smallest attainable, and flags a disagreement with the t-based label only where the exact
test could have reached the label's level (`exact_check`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

EXACT_UP_TO = 16  # all 2^n sign patterns up to here; Monte Carlo beyond
DRAWS = 20_000  # Monte Carlo sign patterns beyond EXACT_UP_TO
SEED = 0


def sign_flip_p(x) -> float:
    """Two-sided sign-flip permutation p of the mean of `x` against 0 (scipy's
    `permutation_test`, `permutation_type="samples"` on one sample: every sign pattern)."""
    x = np.asarray(x, dtype=float)
    if x.size == 0 or not np.any(x):
        return 1.0
    exact = x.size <= EXACT_UP_TO
    res = sps.permutation_test((x,), np.mean, permutation_type="samples",
                               alternative="two-sided", vectorized=True,
                               n_resamples=2 ** x.size if exact else DRAWS,
                               rng=np.random.default_rng(SEED))
    return float(res.pvalue)


def wilcoxon_p(x) -> float:
    """Two-sided Wilcoxon signed-rank p of `x` against 0 (scipy; zeros dropped, as
    Wilcoxon's original test); 1.0 where every difference is 0."""
    x = np.asarray(x, dtype=float)
    if not np.any(x):
        return 1.0
    return float(sps.wilcoxon(x, zero_method="wilcox", alternative="two-sided").pvalue)


def min_p(n: int) -> float:
    """The smallest two-sided p a sign-flip (or signed-rank) test attains on n seeds."""
    return min(1.0, 2.0 / 2 ** n) if n <= EXACT_UP_TO else 2.0 / (DRAWS + 1)


def exact_check(x, t_significant: bool, alpha: float) -> dict:
    """Both exact p values of the centred per-seed statistic `x`, the smallest attainable,
    and whether the sign-flip test disagrees with the t-based label at its per-comparison
    level `alpha` (only where the exact test could reach `alpha` at all)."""
    x = np.asarray(x, dtype=float)
    p_flip, p_rank, floor = sign_flip_p(x), wilcoxon_p(x), min_p(x.size)
    attainable = floor <= alpha
    disagrees = attainable and (p_flip <= alpha) != t_significant
    out = {"sign_flip_p": p_flip, "wilcoxon_p": p_rank, "min_p": floor, "alpha": alpha,
           "attainable": attainable, "disagrees": bool(disagrees)}
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in out.items()}
