"""direction: arm a's value beats arm b's (`expect: greater | less`), seed by seed.

    - kind: direction
      metric: eval/accuracy_trained
      arms: [cegppo, grpo]          # or four arms [a, b, c, d]: (a - b) vs (c - d)
      expect: greater

Its statistic is the paired difference a - b per seed (with four arms, (a - b) - (c - d):
a comparison of gains); its test the two-sided paired t; its label reads the
Holm-adjusted p, and a non-significant interval inside +-min_effect is "negligible".
"""

from __future__ import annotations

from lmpo.experiments.stats.kinds.base import CLAIM_KINDS, ClaimKind


@CLAIM_KINDS.register("direction", title="direction",
                      summary="one arm's value beats another's, seed by seed (paired t)")
class Direction(ClaimKind):
    name = "direction"
    expects = ("greater", "less")
    needs = frozenset({"expect"})
    reads_p = True
    negligible_band = True
    exact_tests = True

    def arm_counts(self, claim: dict) -> tuple[int, ...]:
        return (2, 4)

    def describe(self, claim: dict, metric: str, a: str, b: str) -> str:
        return f"{metric}: {a} {'>' if claim['expect'] == 'greater' else '<'} {b}"
