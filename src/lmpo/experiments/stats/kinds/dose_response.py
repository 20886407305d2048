"""dose_response: a pair's effect changes with the condition's dose (a trend over levels).

    - kind: dose_response
      metric: eval/accuracy_trained
      arms: [cegppo, grpo]          # the pair, compared at every condition level
      expect: greater               # the sign of the effect's slope over the dose
      x: rollout/logp_mismatch      # optional: a metric shown per level

It needs conditions with >= 2 levels its arms share and takes no `at`: it is judged over
them, as a direction claim on each seed's fitted change over the dose range
(`lmpo.experiments.design.dose`), with the effect at every level shown beside it.
"""

from __future__ import annotations

from lmpo.experiments.stats.kinds.base import CLAIM_KINDS, ClaimKind
from lmpo.experiments.stats.kinds.direction import Direction


@CLAIM_KINDS.register("dose_response", title="dose-response",
                      summary="a pair's effect trends with the condition's dose")
class DoseResponse(ClaimKind):
    name = "dose_response"
    expects = Direction.expects
    needs = frozenset({"expect"})
    allows = frozenset({"x"})
    over_levels = True
    judged_kind = Direction.name
    paired = False  # its seeds' "arms" are fitted trends, shown per level instead

    def check_own(self, claim: dict, where: str) -> None:
        from lmpo.errors import ConfigError

        if claim["expect"] not in self.expects:
            raise ConfigError(f"{where}: expect must be one of {self.expects} (the sign of "
                              "the effect's slope over the dose)")

    def describe(self, claim: dict, metric: str, a: str, b: str) -> str:
        return (f"{metric}: slope of ({a} - {b}) over the dose "
                f"{'>' if claim['expect'] == 'greater' else '<'} 0")
