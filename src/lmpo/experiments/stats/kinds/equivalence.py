"""equivalence: the arms' values lie within a margin of each other (TOST).

    - kind: equivalence
      metric: eval/accuracy_trained
      arms: [ppo_or, ppo_clip]
      margin: 0.03                  # in the metric's units (a share of b with `ratio`)
      statistic: difference         # difference (a - b) | ratio (a / b - 1)

Its test is TOST (the larger of the two one-sided p values against -+margin); its label
reads the interval at 1 - 2 alpha: within the margin it holds, wholly outside it is
contradicted, else not shown. Its power is held against the margin. A sequential design
cannot decide it (its seeds are planned for a test of no difference).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from lmpo.experiments.stats.kinds.base import CLAIM_KINDS, ClaimKind
from lmpo.experiments.stats.seeds import LEVEL


@CLAIM_KINDS.register("equivalence", title="equivalence",
                      summary="two arms within a margin of each other (TOST)")
class Equivalence(ClaimKind):
    name = "equivalence"
    needs = frozenset({"margin"})
    allows = frozenset({"statistic"})
    statistics = ("difference", "ratio")
    test_name = "TOST p"
    bound_key = "margin"
    sequential_headline = False

    def check_own(self, claim: dict, where: str) -> None:
        from lmpo.errors import ConfigError

        if not claim["margin"] > 0:
            raise ConfigError(f"{where}: margin must be > 0")

    def describe(self, claim: dict, metric: str, a: str, b: str) -> str:
        if claim.get("statistic") == "ratio":
            return f"{metric}: |{a} / {b} - 1| <= {claim['margin']:.4g}"
        return f"{metric}: |{a} - {b}| <= {claim['margin']:.4g}"

    def per_seed(self, claim: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return a / b - 1.0 if claim.get("statistic") == "ratio" else a - b

    def labelling_level(self, alpha: float) -> float:
        """Two one-sided tests at alpha: the interval lies within the margin exactly when
        the TOST p <= alpha."""
        return 1 - 2 * alpha

    def p_value(self, claim: dict, a, b) -> float:
        x = self.per_seed(claim, np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        m, sd, n = float(x.mean()), float(x.std(ddof=1)), x.size
        margin = float(claim["margin"])
        if sd == 0:
            return 0.0 if abs(m) <= margin else 1.0
        se = sd / math.sqrt(n)
        return float(max(sps.t.sf((m + margin) / se, n - 1), sps.t.cdf((m - margin) / se, n - 1)))

    def mde_for(self, expect, sd: float, n: int, level: float = LEVEL, r: float = 0.0
                ) -> float:
        """The interval's expected half-width."""
        return float(sps.t.ppf((1 + level) / 2, n - 1) * sd / math.sqrt(n))

    def verdict(self, claim: dict, point: float, lo: float, hi: float) -> str:
        margin = float(claim["margin"])  # within, wholly outside, or neither
        if -margin <= lo and hi <= margin:
            return "holds"
        return "contradicted" if lo > margin or hi < -margin else "not shown"

    def includes_null(self, claim: dict, lo: float, hi: float) -> bool:
        return True  # an equivalence claim's null is always in reach

    def unit(self, statistic: str | None) -> tuple[float, str, str] | None:
        # a / b - 1: a relative difference, in percent
        return (100.0, "%", "points") if statistic == "ratio" else None
