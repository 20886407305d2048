"""A claim's label from its numbers (`lmpo.experiments.stats.seeds`) and its family's step-down
(`lmpo.experiments.stats.multiplicity`), decided in the order of `LABELS`:

1. "insufficient seeds" below 3 seeds;
   "mechanism inert" where the first arm's update is, on its own batches, within the
   calibrated floor of its method's ablated twin (the same run with only the method's
   mechanism removed), whatever the effect;
2. "confounded" (an audit's finding; `lmpo.experiments.report.audit`);
3. "not engaged", only where the labelling interval includes the null;
4. "holds" / "contradicted": significant after the step-down (direction, spread: the
   Holm-adjusted p <= alpha; threshold, equivalence: the interval at the claim's
   per-comparison level passes the bound / lies within the margin, which is the same
   test); a significant direction claim whose interval lies inside +-min_effect says
   "smaller than min_effect";
5. "negligible": a non-significant direction claim (or trend) whose labelling interval
   lies inside +-min_effect: the data exclude an effect of the size that matters;
6. "underpowered (MDE x > min_effect y)": a weak label whose minimum detectable effect at
   the labelling level exceeds min_effect (with the unadjusted interval where that one
   excludes the null);
7. the weak label: "direction only", "inconclusive", "not met", "not shown".

Beside the t, a direction claim carries the exact sign-flip and signed-rank p values
(`lmpo.experiments.stats.exact`), which flag a disagreement but never change the label.
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.stats.exact import exact_check
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.seeds import ALPHA, MIN_SEEDS, WEAK


def judge(claim: dict, a, b=None, *, confounded: str | None = None,
          not_engaged: str | None = None, alpha: float = ALPHA,
          p_adj: float | None = None, inert: str | None = None) -> dict:
    """The claim's effect, interval, MDE and label for per-seed values a, b (same seeds,
    same order; a claim on one arm's value has no b), with the audits' findings.

    `alpha` is the claim's per-comparison level from its family's step-down
    (`lmpo.experiments.stats.multiplicity`), `p_adj` its Holm-adjusted p (its own p when
    judged alone). The label is read from `p_adj` (direction, spread; threshold and
    equivalence from the interval at `alpha`, which agrees with it) and the interval at
    `alpha` (`ci_holm`, at `holm_level`) is shown beside it, with the unadjusted 95%
    interval (`ci`). Order: insufficient seeds; mechanism inert (`inert`: the first arm's
    update within the floor of its method's ablated twin); confounded; not engaged (only where the
    labelling interval includes the null: a significant result is never hidden); holds /
    contradicted (a significant result; "smaller than min_effect" where its interval lies
    inside +-min_effect); negligible (a non-significant direction claim whose labelling
    interval lies inside +-min_effect: the data exclude an effect that matters);
    underpowered (a weak label whose MDE exceeds min_effect); the weak label."""
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    kind = claim_kind(claim["kind"])
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same seeds: {a.size} vs {b.size}")
    out = {"n": int(a.size), "min_effect": claim.get("min_effect"),
           "paper_effect": claim.get("paper_effect")}
    if a.size < MIN_SEEDS:
        return out | too_few(kind, claim, a, b)
    level = kind.labelling_level(alpha)
    point, lo, hi, method = kind.interval(claim, a, b)
    hlo, hhi = kind.interval(claim, a, b, level)[1:3]
    p = kind.p_value(claim, a, b)
    p_adj = p if p_adj is None else p_adj
    m, base = kind.mde(claim, a, b, level), kind.verdict(claim, point, hlo, hhi)
    if kind.reads_p:
        base = kind.read_p(claim, point, p_adj)
    out |= {"effect": point, "ci": [lo, hi], "ci_holm": [hlo, hhi], "holm_level": level,
            "alpha": alpha, "method": method, "mde": m, "p": p, "p_adj": p_adj,
            "p_improve": kind.improvement(a, b)} | exact_of(kind, claim, a, b, p_adj, alpha)
    if inert:  # the method's own mechanism did not move the update: whatever the effect
        return out | {"verdict": "mechanism inert", "reason": inert, "first": base}
    if confounded:
        return out | {"verdict": "confounded", "reason": confounded, "first": base}
    if not_engaged and kind.includes_null(claim, hlo, hhi):
        return out | {"verdict": "not engaged", "reason": not_engaged, "first": base}
    small = claim.get("min_effect")
    inside = small is not None and kind.negligible_band and -small < hlo and hhi < small
    if base in ("holds", "contradicted"):
        return out | {"verdict": base, "reason": f"smaller than min_effect {small:g}"
                      if inside else f"MDE {m:.3g}"}
    if inside:
        return out | {"verdict": "negligible", "first": base,
                      "reason": f"interval inside +-min_effect {small:g}"}
    limit = kind.underpowered(claim, m)
    if base in WEAK and limit is not None:
        if not kind.includes_null(claim, lo, hi):
            out["unadjusted"] = [point, lo, hi]
        return out | {"verdict": "underpowered", "reason": kind.underpowered_reason(m, limit),
                      "first": base}
    return out | {"verdict": base, "reason": f"MDE {m:.3g}"}


def exact_of(kind, claim: dict, a, b, p_adj: float, alpha: float) -> dict:
    """{exact: ...} beside the t where the kind takes exact tests (stats.exact), else {}."""
    if not kind.exact_tests:
        return {}
    return {"exact": exact_check(kind.centered(claim, a, b), p_adj <= ALPHA, alpha)}


def too_few(kind, claim: dict, a: np.ndarray, b: np.ndarray) -> dict:
    """The label below MIN_SEEDS: the point estimate where the kind has one, no test."""
    point = float(kind.point(claim, a, b)) if a.size >= kind.min_points else math.nan
    return {"effect": point, "ci": [math.nan, math.nan], "method": None, "mde": math.nan,
            "p": math.nan, "p_adj": math.nan, "verdict": "insufficient seeds",
            "reason": f"{a.size} seeds, fewer than {MIN_SEEDS}"}


def evaluate_claim(claim: dict, a, b=None) -> dict:
    """`judge` without audits: the numbers and the interval's verdict."""
    return judge(claim, a, b)
