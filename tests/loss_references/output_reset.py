"""Output Reset: the one-sided squared margin in log-ratio space."""

from __future__ import annotations

from tests.loss_references import reference


@reference("output_reset", cases=[{}, {"alpha": 0.5, "weight": "abs"}])
def output_reset(lp, olp, a, *, alpha=0.2, weight="sign"):
    if a == 0:
        return 0.0, 0.0
    rho = max(-20.0, min(20.0, lp - olp))
    s = 1.0 if a > 0 else -1.0
    h = max(0.0, alpha - s * rho)
    k = abs(a) if weight == "abs" else 1.0
    return k * h * h, -2.0 * k * s * h
