"""Power planned before the runs: what each headline claim could detect at each look.

    power: {source: experiments/results/drpo4/sweep, arms: {drpo: drpo@L0}}

The source is a sweep directory with finished runs (a pilot's, or an earlier edition's
committed rows); `arms` maps an arm of this experiment to the source's arm where the names
differ (an arm at a condition level reads `arm@level`, tried by itself). For each headline
claim the per-seed statistic the claim will be judged on is read from the source's runs,
and its SD is taken at its one-sided 80% upper confidence bound, sd sqrt((n - 1) /
chi2_{0.2, n-1}) (a pilot's SD is itself noisy; planning with the point estimate
under-powers half the time). The MDE at each look is the claim kind's own (80% power) at
the look's nominal level: the O'Brien-Fleming level of a design at alpha / r for r
headline claims (Holm's first step, the strictest), or alpha / r at a fixed seed count.

`lmpo compare --power` prints the plan and starts nothing; `lmpo compare` refuses, in one
line and before anything is written, an experiment with a declared source whose headline
MDE at its largest seed count exceeds the claim's min_effect, unless the claim says
`exploratory: true` (then it runs, and the plan lists it as planned underpowered). The
plan reads the source's rows: `lmpo.experiments.run.power_plan`.
"""

from __future__ import annotations

import math

from scipy import stats as sps

from lmpo.errors import ConfigError
from lmpo.experiments.design.claims import claim_role

UCB = 0.8  # one-sided confidence of the SD's upper bound


def parse_power(value, where: str) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, dict) or "source" not in value or set(value) - {"source", "arms"} \
            or not isinstance(value.get("arms") or {}, dict):
        raise ConfigError(f"{where}: power must be {{source: SWEEP_DIR, arms: {{ARM: "
                          f"SOURCE_ARM}}}}, got {value!r}")
    return {"source": str(value["source"]), "arms": dict(value.get("arms") or {})}


def sd_upper(sd: float, n: int, confidence: float = UCB) -> float:
    """The one-sided upper confidence bound of a normal SD estimated on n values."""
    return sd * math.sqrt((n - 1) / sps.chi2.ppf(1 - confidence, n - 1))


def headline_claims(exp) -> list[dict]:
    primaries = any(c.get("primary") for c in exp.claims)
    return [c for c in exp.claims if claim_role(c, primaries) == "headline"]


def look_sizes_of(exp) -> list[int]:
    from lmpo.experiments.design.sequential import look_sizes

    return look_sizes(exp.design) if exp.design else [len(exp.seeds)]
