"""ROLL's topr and kimi15 (roll/pipeline/agentic/agentic_actor_pg_worker.py)."""

from __future__ import annotations

from tests.loss_references import ratio, reference


@reference("topr", cases=[{}, {"positive_weight": 0.5, "negative_weight": 2.0}])
def topr(lp, olp, a, *, positive_weight=1.0, negative_weight=1.0):
    w = positive_weight if a > 0 else negative_weight * min(max(ratio(lp, olp), 0.0), 1.0)
    return -w * a * lp, -w * a


@reference("kimi15", cases=[{}, {"tau": 0.9}])
def kimi15(lp, olp, a, *, tau=0.1):
    rho = max(min(lp - olp, 20.0), -20.0)
    return -a * lp + 0.5 * tau * rho * rho, -a + tau * rho
