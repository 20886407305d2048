"""spread: arm a's values vary less (or more) across seeds than arm b's.

    - kind: spread
      metric: eval/accuracy_trained
      arms: [ebpo, grpo]
      expect: lower                 # lower | higher: std(a) vs std(b)

Its statistic is the ratio of the arms' standard deviations over the same seeds; its test
Pitman-Morgan's (the paired test of equal variances: the arms share seeds, so an F test
is the wrong test), its interval that test's inversion, and its MDE the std ratio the test
resolves at the arms' correlation (Fisher's z). A sequential design cannot decide it.
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.stats.kinds.base import CLAIM_KINDS, ClaimKind
from lmpo.experiments.stats.seeds import LEVEL, pitman_morgan, spread_mde, spread_ratio


@CLAIM_KINDS.register("spread", title="spread",
                      summary="one arm's seed-to-seed spread below another's (Pitman-Morgan)")
class Spread(ClaimKind):
    name = "spread"
    expects = ("lower", "higher")
    needs = frozenset({"expect"})
    test_name = "Pitman-Morgan p"
    mde_is_ratio = True
    center = 1.0
    reads_p = True
    sequential_headline = False
    matched = False
    min_points = 2

    def describe(self, claim: dict, metric: str, a: str, b: str) -> str:
        return f"{metric}: std({a}) {'<' if claim['expect'] == 'lower' else '>'} std({b})"

    def point(self, claim: dict, a: np.ndarray, b: np.ndarray) -> float:
        return float(spread_ratio(a, b))

    def interval(self, claim: dict, a, b, level: float = LEVEL
                 ) -> tuple[float, float, float, str]:
        a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        _, lo, hi = pitman_morgan(a, b, level)
        return float(spread_ratio(a, b)), lo, hi, "Pitman-Morgan"

    def p_value(self, claim: dict, a, b) -> float:
        return pitman_morgan(np.asarray(a, dtype=float), np.asarray(b, dtype=float))[0]

    def mde_for(self, expect, sd: float, n: int, level: float = LEVEL, r: float = 0.0
                ) -> float:
        """The std ratio Pitman-Morgan's test resolves at correlation `r` (`sd` unused)."""
        return spread_mde(expect, r, n, level)

    def mde(self, claim: dict, a, b, level: float = LEVEL) -> float:
        r = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else 0.0
        return self.mde_for(claim.get("expect"), 0.0, a.size, level, r)

    def underpowered(self, claim: dict, m: float) -> float | None:
        """A ratio MDE fails when it is further from 1 than min_effect."""
        level = claim.get("min_effect")
        if level is None or math.isnan(m):
            return None
        short = m < level if claim["expect"] == "lower" else m > level
        return level if short else None

    def underpowered_reason(self, m: float, limit: float) -> str:
        return f"MDE ratio {m:.3g} vs min_effect {limit:.3g}"

    def unit(self, statistic: str | None) -> tuple[float, str, str] | None:
        return 1.0, " ×", "ratio"
