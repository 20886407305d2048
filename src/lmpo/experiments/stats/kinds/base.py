"""What a claim kind declares, and the registry that holds the kinds.

A claim kind is a class registered in `CLAIM_KINDS` (the same `Registry` the parts use)
under its `name`, in a module of its own in this folder. It declares its schema (the keys
it needs and takes, the values of `expect` and `statistic`, how many arms), its per-seed
statistic, its test (p value, interval, the level its label reads at, MDE), how the
label reads from them (the verdict, the null), and its units. Everything that judges,
checks or prints a claim asks its kind (`claim_kind(name)`); no other module names one.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats as sps

from lmpo.errors import ConfigError
from lmpo.experiments.stats.seeds import ALPHA, LEVEL, MIN_SEEDS, power_ncp, t_interval
from lmpo.registry import Registry

CLAIM_KINDS = Registry("claim kind")
UP = ("greater", "higher", "above")  # the `expect` values that ask for a larger statistic


@functools.cache
def claim_kind(name: str) -> ClaimKind:
    """The kind registered as `name` (one instance each); unknown names fail in one line
    that lists the kinds."""
    return CLAIM_KINDS.get(name)


def claim_p(claim: dict, a, b=None) -> float:
    """The claim's p value from per-seed values (NaN below MIN_SEEDS)."""
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    return math.nan if a.size < MIN_SEEDS else claim_kind(claim["kind"]).p_value(claim, a, b)


class ClaimKind:
    """A claim kind's defaults: a paired comparison of two arms' per-seed values by the
    paired t test, its label read from the interval at the claim's level."""

    name = ""
    expects: tuple = ()  # the values `expect` takes; () when the kind takes no `expect`
    needs: frozenset = frozenset()  # keys beyond kind, metric, arms, sentence
    allows: frozenset = frozenset()  # keys of its own beside the optional ones
    statistics: tuple = ()  # the values `statistic` takes, its default first
    test_name = "p"  # the name of its test's p value on a claim card
    bound_key = "min_effect"  # the size its MDE is held against
    mde_is_ratio = False  # its MDE is a ratio (held against min_effect as a ratio)
    center = 0.0  # the statistic's value under no effect
    reads_p = False  # significance from the (Holm-adjusted) p, not the interval
    negligible_band = False  # a non-significant interval inside +-min_effect is "negligible"
    sequential_headline = True  # a sequential design may decide it (a two-sided paired t)
    paired = True  # it compares two arms seed by seed (a probability of improvement)
    matched = True  # it may be read at a drift level (`matched:`)
    over_levels = False  # judged over the condition levels (a trend), not at a level
    judged_kind = ""  # the kind its label is judged as (itself unless it says otherwise)
    min_points = 1  # seeds needed for a point estimate
    exact_tests = False  # its card adds the sign-flip and signed-rank p (stats.exact)

    def __init__(self) -> None:
        self.judged_kind = self.judged_kind or self.name

    # ------------------------------------------------------------ schema
    def arm_counts(self, claim: dict) -> tuple[int, ...]:
        """How many arms the claim may name."""
        return (2,)

    def check_own(self, claim: dict, where: str) -> None:
        """ConfigError for a value only this kind constrains (after its keys are known)."""
        if self.expects and claim["expect"] not in self.expects:
            raise ConfigError(f"{where}: expect must be one of {self.expects} for a "
                              f"{self.name} claim")

    def describe(self, claim: dict, metric: str, a: str, b: str) -> str:
        """The claim in one line: '<metric>: <a> <relation> <b>'."""
        raise NotImplementedError

    # ------------------------------------------------------------ numbers
    def per_seed(self, claim: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """The claim's statistic, one value per seed."""
        return a - b

    def shift(self, claim: dict) -> float:
        """The null the per-seed statistic is tested against."""
        return 0.0

    def centered(self, claim: dict, a, b) -> np.ndarray:
        """The per-seed statistic minus its null (what a sequential design tests)."""
        x = self.per_seed(claim, np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        return x - self.shift(claim) if self.shift(claim) else x

    def point(self, claim: dict, a: np.ndarray, b: np.ndarray) -> float:
        return float(self.per_seed(claim, a, b).mean())

    def interval(self, claim: dict, a, b, level: float = LEVEL
                 ) -> tuple[float, float, float, str]:
        """(point, lo, hi, method): the paired t interval of the per-seed statistic (the
        inversion of the claim's own test, at any seed count)."""
        x = self.per_seed(claim, np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        return float(x.mean()), *t_interval(x, level), "paired t"

    def labelling_level(self, alpha: float) -> float:
        """The level of the interval the label reads at per-claim `alpha`."""
        return 1 - alpha

    def p_value(self, claim: dict, a, b) -> float:
        """The two-sided paired t test's p against the null (`shift`)."""
        x = self.per_seed(claim, np.asarray(a, dtype=float), np.asarray(b, dtype=float))
        m, sd, n = float(x.mean()), float(x.std(ddof=1)), x.size
        null = self.shift(claim)
        if sd == 0:
            return 0.0 if m != null else 1.0
        return float(2 * sps.t.sf(abs((m - null) / (sd / math.sqrt(n))), n - 1))

    def mde_for(self, expect, sd: float, n: int, level: float = LEVEL, r: float = 0.0
                ) -> float:
        """The effect detected with 80% power at `level` by `n` seeds whose per-seed
        statistic has standard deviation `sd` (noncentral t)."""
        return power_ncp(n - 1, level) * sd / math.sqrt(n)

    def mde(self, claim: dict, a, b, level: float = LEVEL) -> float:
        sd = float(self.per_seed(claim, a, b).std(ddof=1))
        return self.mde_for(claim.get("expect"), sd, a.size, level)

    def underpowered(self, claim: dict, m: float) -> float | None:
        """The size the MDE `m` fails (its `bound_key`), or None."""
        level = claim.get(self.bound_key)
        if level is None or math.isnan(m):
            return None
        return level if m > level else None

    def improvement(self, a, b) -> float | None:
        """The probability of improvement: the share of seeds whose first arm's value beats
        the second's (ties count half); context, not a test. None for a claim that is not a
        paired comparison, or on one value."""
        if not self.paired or a is b:
            return None
        d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
        return float(((d > 0).sum() + 0.5 * (d == 0).sum()) / d.size) if d.size else None

    def underpowered_reason(self, m: float, limit: float) -> str:
        return f"MDE {m:.3g} > min_effect {limit:.3g}"

    # ------------------------------------------------------------ labels
    def verdict(self, claim: dict, point: float, lo: float, hi: float) -> str:
        """The verdict from the interval alone (before audits and power)."""
        sign = 1.0 if claim["expect"] in UP else -1.0
        right = sign * (point - self.center) > 0
        excludes = lo > self.center or hi < self.center
        if right:
            return "holds" if excludes else "direction only"
        return "contradicted" if excludes else "inconclusive"

    def read_p(self, claim: dict, point: float, p_adj: float) -> str:
        """The label from the adjusted p: significant at the family's alpha ("holds" in the
        expected direction, else "contradicted"), or not ("direction only" /
        "inconclusive")."""
        right = (1.0 if claim["expect"] in UP else -1.0) * (point - self.center) > 0
        if p_adj <= ALPHA:
            return "holds" if right else "contradicted"
        return "direction only" if right else "inconclusive"

    def includes_null(self, claim: dict, lo: float, hi: float) -> bool:
        """Whether an interval includes the claim's null."""
        null = self.shift(claim) if self.shift(claim) else self.center
        return not (lo > null or hi < null)

    def premise_failed(self, claim: dict, result: dict) -> str | None:
        """Why a premise of this kind that did not hold failed outright, or None (then it
        is undecided)."""
        return None

    # ------------------------------------------------------------ units
    def unit(self, statistic: str | None) -> tuple[float, str, str] | None:
        """(scale, suffix, style) where the kind decides its statistic's units, else None
        (the metric's own units)."""
        return (1.0, " ×", "ratio") if statistic == "ratio" else None
