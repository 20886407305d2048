"""threshold: a statistic of the arms passes a bound (`expect: below | above`).

    - kind: threshold
      metric: tokens/cumulative
      arms: [ppo, espo]
      statistic: ratio              # ratio (b / a) | difference (b - a) | value (a, one arm)
      bound: 0.8
      expect: below

Its test is the paired t against the bound; it holds when the interval at the claim's
level lies on the bound's right side (the same test). A premise of this kind fails
outright when that interval lies wholly on the wrong side.
"""

from __future__ import annotations

import numpy as np

from lmpo.experiments.stats.kinds.base import CLAIM_KINDS, ClaimKind


@CLAIM_KINDS.register("threshold", title="threshold",
                      summary="a ratio, difference or value passes a bound (paired t)")
class Threshold(ClaimKind):
    name = "threshold"
    expects = ("below", "above")
    needs = frozenset({"expect", "bound", "statistic"})
    statistics = ("ratio", "difference", "value")
    paired = False  # a statistic against a bound: no probability of improvement

    def arm_counts(self, claim: dict) -> tuple[int, ...]:
        return (1,) if claim.get("statistic") == "value" else (2,)

    def describe(self, claim: dict, metric: str, a: str, b: str) -> str:
        stat = {"ratio": f"{b} / {a}", "difference": f"{b} - {a}", "value": a}[
            claim["statistic"]]
        return f"{metric}: {stat} {'<=' if claim['expect'] == 'below' else '>='} " \
               f"{claim['bound']}"

    def per_seed(self, claim: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return {"value": a, "ratio": b / a, "difference": b - a}[claim["statistic"]]

    def shift(self, claim: dict) -> float:
        return float(claim.get("bound", 0.0))

    def passes(self, claim: dict, x: float) -> bool:
        return x <= float(claim["bound"]) if claim["expect"] == "below" else \
            x >= float(claim["bound"])

    def verdict(self, claim: dict, point: float, lo: float, hi: float) -> str:
        if self.passes(claim, hi if claim["expect"] == "below" else lo):
            return "holds"
        return "direction only" if self.passes(claim, point) else "not met"

    def premise_failed(self, claim: dict, result: dict) -> str | None:
        if result["verdict"] != "not met":
            return None
        lo, hi = result.get("ci_holm") or result.get("ci") or (None, None)
        bound, below = float(claim["bound"]), claim["expect"] == "below"
        if lo is not None and (lo > bound if below else hi < bound):
            return f"interval wholly {'above' if below else 'below'} {bound:g}"
        return None
