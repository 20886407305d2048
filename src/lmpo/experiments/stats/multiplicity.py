"""Multiplicity within a family of claims: Holm's step-down procedure.

A report's claims form families (headline, secondary, descriptive; `audit.judge_claims`).
Within a family of m judged claims, Holm's procedure (Holm 1979) orders the p values
p(1) <= ... <= p(m) and rejects H(1), H(2), ... while p(k) <= alpha / (m - k + 1),
stopping at the first that is not rejected: every claim after it stands, whatever its
own p. Its adjusted p values are the running maximum of (m - k + 1) p(k), capped at 1:
`holm_adjust` computes them in numpy and tests/test_multiplicity.py checks it equal to
`statsmodels.stats.multitest.multipletests(method="holm")` on random p vectors (ties and
p = 1 included); statsmodels is not called at run time because `multipletests` runs a
full `gc.collect()` on every call (20-60 ms in a process holding torch).

The interval shown beside a label agrees with it (`step_down_alphas`): a rejected claim
of rank k reads the interval at 1 - alpha / (m - k + 1) (it excludes the null, as
p(k) <= alpha / (m - k + 1)); every claim from the first non-rejection on reads the
interval at the level where the procedure stopped, 1 - alpha / (m - j + 1), which
includes the null for all of them. These are the intervals of the step-down's own
tests, not simultaneous confidence intervals (docs/reproductions.md).
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.stats.seeds import ALPHA


def holm_adjust(ps: list[float]) -> list[float]:
    """Holm-adjusted p values of a family (NaN, a claim without a p, stays NaN and is not
    counted in the family's size)."""
    judged = [i for i, p in enumerate(ps) if not math.isnan(p)]
    out = [math.nan] * len(ps)
    if judged:
        x = np.array([ps[i] for i in judged], dtype=float)
        order = np.argsort(x, kind="mergesort")
        m = x.size
        adjusted = np.empty(m)
        adjusted[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * x[order]))
        for i, q in zip(judged, adjusted, strict=True):
            out[i] = float(q)
    return out


def step_down_alphas(ps: list[float], alpha: float = ALPHA) -> list[float]:
    """Each claim's per-comparison alpha under the step-down: alpha / (m - rank) for a
    rejected claim (rank from 0, smallest p first), alpha / (m - j) from the first
    non-rejected rank j on; `alpha` for a claim without a p."""
    judged = sorted((i for i, p in enumerate(ps) if not math.isnan(p)), key=lambda i: ps[i])
    m, out, stopped = len(judged), [alpha] * len(ps), None
    for rank, i in enumerate(judged):
        if stopped is None and ps[i] > alpha / (m - rank):
            stopped = alpha / (m - rank)
        out[i] = stopped if stopped is not None else alpha / (m - rank)
    return out


def family_size(ps: list[float]) -> int:
    return sum(not math.isnan(p) for p in ps)


def family_levels(claims: list[tuple[str, float]], keys: list | None = None
                  ) -> list[tuple[float, float, dict]]:
    """Per claim (role, p): its per-comparison alpha and Holm-adjusted p within the family
    of its role, and {family, family_size}. Claims with one `keys` entry in a family are
    one hypothesis there: counted once, each given that hypothesis's levels."""
    keys = list(range(len(claims))) if keys is None else keys
    out: list = [None] * len(claims)
    for role in dict.fromkeys(r for r, _ in claims):
        members = [i for i, (r, _) in enumerate(claims) if r == role]
        first = {}
        for i in members:
            first.setdefault(keys[i], i)
        unique = list(first.values())
        ps = [claims[i][1] for i in unique]
        info = {"family": role, "family_size": family_size(ps)}
        levels = {keys[i]: (alpha, None if math.isnan(q) else q) for i, alpha, q in
                  zip(unique, step_down_alphas(ps), holm_adjust(ps), strict=True)}
        for i in members:
            out[i] = (*levels[keys[i]], info)
    return out
