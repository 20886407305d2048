"""A claim's label from its numbers (`lmpo.experiments.stats`) and its family's step-down
(`lmpo.experiments.multiplicity`), decided in the order of `LABELS`:

1. "insufficient seeds" below 3 seeds;
2. "confounded" (an audit's finding; `lmpo.experiments.audit`);
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
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.stats import (
    ALPHA,
    MIN_SEEDS,
    WEAK,
    improvement,
    interval,
    labelling_level,
    mde,
    p_value,
    per_seed,
    spread_ratio,
    underpowered,
)


def verdict(kind: str, claim: dict, point: float, lo: float, hi: float) -> str:
    """The verdict from the interval alone (before audits and power)."""
    if kind in ("direction", "spread"):
        center = 0.0 if kind == "direction" else 1.0
        sign = 1.0 if claim["expect"] in ("greater", "higher") else -1.0
        right = sign * (point - center) > 0
        excludes = lo > center or hi < center
        if right:
            return "holds" if excludes else "direction only"
        return "contradicted" if excludes else "inconclusive"
    if kind == "threshold":
        bound = float(claim["bound"])

        def passes(x):
            return x <= bound if claim["expect"] == "below" else x >= bound

        if passes(hi if claim["expect"] == "below" else lo):
            return "holds"
        return "direction only" if passes(point) else "not met"
    margin = float(claim["margin"])  # equivalence: within, wholly outside, or neither
    if -margin <= lo and hi <= margin:
        return "holds"
    return "contradicted" if lo > margin or hi < -margin else "not shown"


def includes_null(kind: str, claim: dict, lo: float, hi: float) -> bool:
    """Whether an interval includes the claim's null: 0 (a difference), 1 (a std ratio),
    the bound (a threshold); an equivalence claim's null is always in reach."""
    if kind == "equivalence":
        return True
    null = {"spread": 1.0, "threshold": float(claim.get("bound", 0.0))}.get(kind, 0.0)
    return not (lo > null or hi < null)


def judge(claim: dict, a, b=None, *, confounded: str | None = None,
          not_engaged: str | None = None, alpha: float = ALPHA,
          p_adj: float | None = None) -> dict:
    """The claim's effect, interval, MDE and label for per-seed values a, b (same seeds,
    same order; a claim on one arm's value has no b), with the audits' findings.

    `alpha` is the claim's per-comparison level from its family's step-down
    (`lmpo.experiments.multiplicity`), `p_adj` its Holm-adjusted p (its own p when
    judged alone). The label is read from `p_adj` (direction, spread; threshold and
    equivalence from the interval at `alpha`, which agrees with it) and the interval at
    `alpha` (`ci_holm`, at `holm_level`) is shown beside it, with the unadjusted 95%
    interval (`ci`). Order: insufficient seeds; confounded; not engaged (only where the
    labelling interval includes the null: a significant result is never hidden); holds /
    contradicted (a significant result; "smaller than min_effect" where its interval lies
    inside +-min_effect); negligible (a non-significant direction claim whose labelling
    interval lies inside +-min_effect: the data exclude an effect that matters);
    underpowered (a weak label whose MDE exceeds min_effect); the weak label."""
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    kind = claim["kind"]
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same seeds: {a.size} vs {b.size}")
    out = {"n": int(a.size), "min_effect": claim.get("min_effect"),
           "paper_effect": claim.get("paper_effect")}
    if a.size < MIN_SEEDS:
        point = math.nan
        if a.size > (kind == "spread"):
            point = float(spread_ratio(a, b) if kind == "spread"
                          else per_seed(kind, claim, a, b).mean())
        return out | {"effect": point, "ci": [math.nan, math.nan], "method": None,
                      "mde": math.nan, "p": math.nan, "p_adj": math.nan,
                      "verdict": "insufficient seeds",
                      "reason": f"{a.size} seeds, fewer than {MIN_SEEDS}"}
    level = labelling_level(kind, alpha)
    point, lo, hi, method = interval(kind, claim, a, b)
    hlo, hhi = interval(kind, claim, a, b, level)[1:3]
    p = p_value(kind, claim, a, b)
    p_adj = p if p_adj is None else p_adj
    m, base = mde(kind, claim, a, b, level), verdict(kind, claim, point, hlo, hhi)
    if kind in ("direction", "spread"):
        base = read_p(kind, claim, point, p_adj, alpha)
    out |= {"effect": point, "ci": [lo, hi], "ci_holm": [hlo, hhi], "holm_level": level,
            "alpha": alpha, "method": method, "mde": m, "p": p, "p_adj": p_adj,
            "p_improve": improvement(kind, a, b)}
    if confounded:
        return out | {"verdict": "confounded", "reason": confounded, "first": base}
    if not_engaged and includes_null(kind, claim, hlo, hhi):
        return out | {"verdict": "not engaged", "reason": not_engaged, "first": base}
    small = claim.get("min_effect")
    inside = small is not None and kind == "direction" and -small < hlo and hhi < small
    if base in ("holds", "contradicted") and kind != "equivalence":
        return out | {"verdict": base, "reason": f"smaller than min_effect {small:g}"
                      if inside else f"MDE {m:.3g}"}
    if inside:
        return out | {"verdict": "negligible", "first": base,
                      "reason": f"interval inside +-min_effect {small:g}"}
    limit = underpowered(kind, claim, m)
    if base in WEAK and limit is not None:
        reason = (f"MDE {m:.3g} > min_effect {limit:.3g}" if kind != "spread"
                  else f"MDE ratio {m:.3g} vs min_effect {limit:.3g}")
        if not includes_null(kind, claim, lo, hi):
            out["unadjusted"] = [point, lo, hi]
        return out | {"verdict": "underpowered", "reason": reason, "first": base}
    return out | {"verdict": base, "reason": f"MDE {m:.3g}"}


def read_p(kind: str, claim: dict, point: float, p_adj: float, alpha: float) -> str:
    """A direction (or spread) claim's label from its adjusted p: significant at the
    family's alpha ("holds" in the expected direction, else "contradicted"), or not
    ("direction only" / "inconclusive")."""
    center = 1.0 if kind == "spread" else 0.0
    sign = 1.0 if claim["expect"] in ("greater", "higher") else -1.0
    right = sign * (point - center) > 0
    if p_adj <= ALPHA:
        return "holds" if right else "contradicted"
    return "direction only" if right else "inconclusive"


def evaluate_claim(claim: dict, a, b=None) -> dict:
    """`judge` without audits: the numbers and the interval's verdict."""
    return judge(claim, a, b)
