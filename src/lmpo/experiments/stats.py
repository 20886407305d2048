"""Statistics over seeds and the rules that turn them into verdicts.

Seeds are the unit: each run gives one number per metric (`reduce_metric`). A summary is
the mean, the std (ddof=1) and a 95% bootstrap CI of the mean. A claim compares arms that
share seeds, through one number per seed: the paired difference (direction; equivalence),
the statistic against its bound (threshold: b / a, b - a or a), or, for a spread claim,
the ratio of the two arms' stds over seeds.

Intervals: with fewer than 10 seeds a paired t interval on the per-seed statistic (a
percentile bootstrap covers ~75% at n = 3, ~84% at n = 5); from 10 seeds, and for spread
claims always, the paired percentile bootstrap (seeded numpy, 10,000 resamples of seed
indices). Verdicts before the audits:

- direction: "holds" (right sign, CI excludes 0), "direction only" (right sign, CI
  includes 0), "contradicted" (wrong sign, CI excludes 0), "inconclusive".
- threshold: "holds" (the whole CI passes the bound), "direction only" (the point does),
  "not met".
- equivalence: "holds" (the CI lies within +-margin), "contradicted" (the CI lies wholly
  outside it), "not shown".
- spread: as direction, around a ratio of 1.

Power: each claim's minimum detectable effect (MDE) at 80% power, from the same per-seed
standard deviation and alpha (0.05, two-sided): the true effect whose paired t interval
would exclude 0 (or pass the bound) in 80% of experiments (noncentral t); for equivalence
the CI's expected half-width; for spread the std ratio an F test would resolve. It is
compared with the claim's `min_effect` (set before the run; for equivalence, the margin).

Verdict order: "confounded" (a config key outside the claim's `differs_in`, or an
effective difference it does not `expect`) > "not engaged" (an `engaged` level not
reached, or its metric not logged) > the verdict above, where "underpowered (MDE x >
min_effect y)" replaces "direction only", "inconclusive", "not met" and "not shown" (a
significant result keeps its label). Below 3 seeds: "insufficient seeds". The report also
gives Holm-adjusted intervals over the experiment's claims.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize
from scipy import stats as sps

RESAMPLES = 10_000
LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.8
SEED = 0
MIN_SEEDS = 3
T_BELOW = 10  # seeds below which direction/threshold/equivalence use a paired t interval
REDUCERS = ("final", "last_k", "first_k", "rebound", "last_over_first", "max", "min", "mean",
            "sum")
EXPECT = {"direction": ("greater", "less"), "threshold": ("below", "above"),
          "equivalence": (None,), "spread": ("lower", "higher"),
          "dose_response": ("greater", "less")}
WEAK = ("direction only", "inconclusive", "not met", "not shown")  # what underpowered replaces

# The effective behaviour of an arm, compared within every claim: (metric, reduce, how a
# difference is judged: a ratio of 1.5 for norms and counts, 0.2 absolute for shares).
EFFECTIVE = {"clipped_share": ("grad/clipped_frac", "mean", "share"),
             "step_norm": ("grad/step_norm", "mean", "ratio"),
             "update_share": ("data/update_share", "mean", "share"),
             "rollout_tokens": ("tokens/cumulative", "final", "ratio"),
             "reward_range": (("reward/max", "reward/min"), "range", "ratio"),
             "adv_abs_mean": ("adv/abs_mean", "mean", "ratio"),
             "optim_steps": ("train/updates", "sum", "ratio")}
ALWAYS_CONFOUNDS = ("optim_steps",)  # never a mediator: unequal optimiser steps
PRE_CLIP = ("grad/norm", "mean")  # shown, never flagged: two always-clipped arms step alike
TOLERANCE = {"ratio": 1.5, "share": 0.2}


# ---------------------------------------------------------------- reading runs
def reduce_metric(rows: list[dict], metric: str, reduce: str = "final", k: int = 20) -> float:
    """One run's value of `metric`: its last logged value ("final"), the mean of its last k
    ("last_k") or of its first k ("first_k": an early window, e.g. a warm-up), how far the
    last k's mean sits above the lowest mean of k consecutive values anywhere in the run
    ("rebound": 0 for a trace that ends at its low), its ratio to the mean of the first k
    ("last_over_first"), its largest or smallest value ("max": a spike; "min"), its mean
    over the run ("mean") or its sum ("sum")."""
    values = [r[metric] for r in rows if metric in r and r[metric] is not None]
    if not values:
        raise KeyError(f"metric {metric!r} was never logged")
    x = np.asarray(values, dtype=float)
    simple = {"final": lambda: x[-1], "last_k": lambda: x[-k:].mean(),
              "first_k": lambda: x[:k].mean(), "max": x.max,
              "min": x.min, "mean": x.mean, "sum": x.sum,
              "last_over_first": lambda: x[-k:].mean() / x[:k].mean()}
    if reduce in simple:
        return float(simple[reduce]())
    if reduce == "rebound":
        w = min(k, x.size)
        means = np.convolve(x, np.ones(w) / w, mode="valid")
        return float(means[-1] - means.min())
    raise ValueError(f"unknown reduce {reduce!r}; valid: {', '.join(REDUCERS)}")


def effective_value(rows: list[dict], name: str) -> float:
    """One run's value of an effective-behaviour quantity (`EFFECTIVE`)."""
    metric, reduce, _ = EFFECTIVE[name]
    if reduce == "range":
        return reduce_metric(rows, metric[0], "max") - reduce_metric(rows, metric[1], "min")
    return reduce_metric(rows, metric, reduce)


# ---------------------------------------------------------------- summaries
def _rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


def percentile_ci(samples: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    finite = samples[~np.isnan(samples)]
    if finite.size == 0:
        return (math.nan, math.nan)
    lo, hi = np.percentile(finite, [100 * (1 - level) / 2, 100 * (1 + level) / 2])
    return float(lo), float(hi)


def bootstrap_mean_ci(x, resamples: int = RESAMPLES) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    if x.size == 0:
        return (math.nan, math.nan)
    idx = _rng().integers(0, x.size, size=(resamples, x.size))
    return percentile_ci(x[idx].mean(axis=1))


def summarize(x) -> dict:
    """{"mean", "std" (ddof=1; NaN below 2 values), "ci" [lo, hi], "n", "values"}."""
    x = np.asarray(x, dtype=float)
    return {"mean": float(x.mean()) if x.size else math.nan,
            "std": float(x.std(ddof=1)) if x.size > 1 else math.nan,
            "ci": list(bootstrap_mean_ci(x)), "n": int(x.size), "values": x.tolist()}


# ---------------------------------------------------------------- a claim's numbers
def per_seed(kind: str, claim: dict, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The claim's statistic, one value per seed (not for spread claims)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "threshold":
            return {"value": a, "ratio": b / a, "difference": b - a}[claim["statistic"]]
        if kind == "equivalence" and claim.get("statistic") == "ratio":
            return a / b - 1.0
        return a - b


def spread_ratio(a: np.ndarray, b: np.ndarray, axis=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        return a.std(axis=axis, ddof=1) / b.std(axis=axis, ddof=1)


def t_interval(x: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    m, n = float(x.mean()), x.size
    half = sps.t.ppf((1 + level) / 2, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return m - half, m + half


def interval(kind: str, claim: dict, a, b, level: float = LEVEL) -> tuple[float, float, float,
                                                                        str]:
    """(point, lo, hi, method) of the claim's statistic."""
    if kind == "spread":
        idx = _rng().integers(0, a.size, size=(RESAMPLES, a.size))
        lo, hi = percentile_ci(np.asarray(spread_ratio(a[idx], b[idx], axis=1)), level)
        return float(spread_ratio(a, b)), lo, hi, "paired bootstrap"
    x = per_seed(kind, claim, a, b)
    if x.size < T_BELOW:
        return float(x.mean()), *t_interval(x, level), "paired t"
    idx = _rng().integers(0, x.size, size=(RESAMPLES, x.size))
    return float(x.mean()), *percentile_ci(x[idx].mean(axis=1), level), "paired bootstrap"


@functools.cache
def power_ncp(df: int, level: float = LEVEL, power: float = POWER) -> float:
    """The noncentrality at which a one-sided rejection at the two-sided `level`'s critical
    t value happens with probability `power`."""
    crit = sps.t.ppf((1 + level) / 2, df)
    return float(optimize.brentq(lambda ncp: sps.nct.sf(crit, df, ncp) - power, 0.0, 200.0))


def mde_for(kind: str, expect: str | None, sd: float, n: int, level: float = LEVEL) -> float:
    """The minimum detectable effect at 80% power of a claim of `kind` whose per-seed
    statistic has standard deviation `sd` over `n` seeds, at the interval's `level`
    (spread: `sd` unused; the std ratio an F test resolves)."""
    alpha = 1 - level
    if kind == "spread":
        df = n - 1
        if expect == "lower":
            return math.sqrt(sps.f.ppf(alpha / 2, df, df) / sps.f.ppf(POWER, df, df))
        return math.sqrt(sps.f.ppf(1 - alpha / 2, df, df) / sps.f.ppf(1 - POWER, df, df))
    if kind == "equivalence":
        return float(sps.t.ppf(1 - alpha / 2, n - 1) * sd / math.sqrt(n))
    return power_ncp(n - 1, level) * sd / math.sqrt(n)


def mde(kind: str, claim: dict, a, b, level: float = LEVEL) -> float:
    sd = 0.0 if kind == "spread" else float(per_seed(kind, claim, a, b).std(ddof=1))
    return mde_for(kind, claim.get("expect"), sd, a.size, level)


def underpowered(kind: str, claim: dict, m: float) -> float | None:
    """The level `m` (the MDE) fails, or None: min_effect (equivalence: the margin); a
    spread claim's MDE is a ratio, failing when it is further from 1 than min_effect."""
    level = claim.get("margin") if kind == "equivalence" else claim.get("min_effect")
    if level is None or math.isnan(m):
        return None
    if kind == "spread":
        short = m < level if claim["expect"] == "lower" else m > level
    else:
        short = m > level
    return level if short else None


def p_value(kind: str, claim: dict, a, b) -> float:
    """Two-sided p of the claim's null (0; the bound; a ratio of 1), for Holm's ordering."""
    if kind == "spread":
        f = float(spread_ratio(a, b)) ** 2
        df = a.size - 1
        return float(min(1.0, 2 * min(sps.f.cdf(f, df, df), sps.f.sf(f, df, df))))
    x = per_seed(kind, claim, a, b)
    null = float(claim["bound"]) if kind == "threshold" else 0.0
    sd = float(x.std(ddof=1))
    if sd == 0:
        return 0.0 if x.mean() != null else 1.0
    t = (x.mean() - null) / (sd / math.sqrt(x.size))
    return float(2 * sps.t.sf(abs(t), x.size - 1))


def claim_p(claim: dict, a, b=None) -> float:
    """The claim's p value from per-seed values (NaN below MIN_SEEDS)."""
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    return math.nan if a.size < MIN_SEEDS else p_value(claim["kind"], claim, a, b)


def holm_levels(ps: list[float]) -> list[float]:
    """Each claim's interval level under Holm's step-down procedure over the family `ps`
    (1 - alpha / (m - rank), smallest p first); LEVEL for a claim without a p."""
    judged = [i for i, p in enumerate(ps) if not math.isnan(p)]
    order = sorted(judged, key=lambda i: ps[i])
    levels = [LEVEL] * len(ps)
    for rank, i in enumerate(order):
        levels[i] = 1 - ALPHA / (len(order) - rank)
    return levels


# ---------------------------------------------------------------- verdicts
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
          not_engaged: str | None = None, level: float = LEVEL) -> dict:
    """The claim's effect, interval, MDE and verdict for per-seed values a, b (same seeds,
    same order; a claim on one arm's value has no b), with the audits' findings. The label
    comes from the interval at `level` (the claim's Holm level among its family; `ci_holm`),
    the 95% interval (`ci`) is shown beside it. `not_engaged`, the reason the pair's
    treatment did not engage, labels the claim only where the labelling interval includes
    the null (or always, for an equivalence claim): a significant result is never hidden."""
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
                      "mde": math.nan, "p": math.nan, "verdict": "insufficient seeds",
                      "reason": f"{a.size} seeds, fewer than {MIN_SEEDS}"}
    point, lo, hi, method = interval(kind, claim, a, b)
    hlo, hhi = (lo, hi) if level == LEVEL else interval(kind, claim, a, b, level)[1:3]
    m, base = mde(kind, claim, a, b, level), verdict(kind, claim, point, hlo, hhi)
    out |= {"effect": point, "ci": [lo, hi], "ci_holm": [hlo, hhi], "holm_level": level,
            "method": method, "mde": m, "p": p_value(kind, claim, a, b)}
    if confounded:
        return out | {"verdict": "confounded", "reason": confounded, "first": base}
    if not_engaged and includes_null(kind, claim, hlo, hhi):
        return out | {"verdict": "not engaged", "reason": not_engaged, "first": base}
    limit = underpowered(kind, claim, m)
    if base in WEAK and limit is not None:
        return out | {"verdict": "underpowered",
                      "reason": f"MDE {m:.3g} > min_effect {limit:.3g}"
                      if kind != "spread" else f"MDE ratio {m:.3g} vs min_effect {limit:.3g}",
                      "first": base}
    return out | {"verdict": base, "reason": f"MDE {m:.3g}"}


def evaluate_claim(claim: dict, a, b=None) -> dict:
    """`judge` without audits: the numbers and the interval's verdict."""
    return judge(claim, a, b)


def effective_flags(pairs: list[tuple[str, str]], quantities: dict[str, dict[str, float]],
                    expects: list[str], tolerance: dict | None = None) -> list[str]:
    """'name = a vs b' for every effective quantity on which a pair of a claim's arms differ
    beyond the tolerance (ratio 1.5 for norms and counts, 0.2 absolute for shares), unless
    it mediates the treatment (`expects`: the claim's mediators and its parts'); unequal
    optimiser steps always count. `quantities`: {arm: {name: mean over seeds}}."""
    tol = TOLERANCE | (tolerance or {})
    flags = []
    for x, y in pairs:
        for name, (_, _, how) in EFFECTIVE.items():
            u, v = quantities.get(x, {}).get(name), quantities.get(y, {}).get(name)
            if (name in expects and name not in ALWAYS_CONFOUNDS) or u is None or v is None:
                continue
            if how == "share":
                far = abs(u - v) > tol["share"]
            else:
                lo, hi = sorted((abs(u), abs(v)))
                far = hi > tol["ratio"] * lo if lo > 0 else hi > 0
            if far:
                flags.append(f"{name} = {u:.3g} ({x}) vs {v:.3g} ({y})")
    return flags
