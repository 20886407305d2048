"""Statistics over seeds: the numbers a claim's label is read from.

Seeds are the unit: each run gives one number per metric (`reduce_metric`). A summary is
the mean, the std (ddof=1) and a 95% bootstrap CI of the mean (the per-arm tables only:
descriptive). A claim compares arms that share seeds, through one number per seed: the
paired difference (direction; equivalence), the statistic against its bound (threshold:
b / a, b - a or a), or, for a spread claim, the two arms' stds over the same seeds.

Each claim has one test, and its interval is that test's inversion at any seed count:
the paired t test (direction, threshold), TOST (equivalence: the larger one-sided p
against -+margin; the interval at 1 - 2 alpha), Pitman-Morgan (spread: the paired test of
equal variances, and the interval of the std ratio it inverts to). Power: the minimum
detectable effect (MDE) at 80% power at the labelling level (noncentral t from the
per-seed sd; for equivalence the interval's expected half-width; for spread the std ratio
Pitman-Morgan's test resolves, by Fisher's z at the arms' correlation), compared with the
claim's `min_effect`. The labels, and the order they are decided in:
`lmpo.experiments.stats.labels`; multiplicity: `lmpo.experiments.stats.multiplicity`; seeds until
decided: `lmpo.experiments.design.sequential`.
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
REDUCERS = ("final", "last_k", "first_k", "rebound", "last_over_first", "max", "max_last_k",
            "min", "mean", "sum", "gain")
WEAK = ("direction only", "inconclusive", "not met", "not shown")  # what underpowered replaces
LABELS = ("insufficient seeds", "mechanism inert", "confounded", "not engaged", "holds",
          "contradicted", "negligible", "underpowered", *WEAK)  # in the order they are decided

# The effective behaviour of an arm, compared within every claim: (metric, reduce, how a
# difference is judged: a ratio of 1.5 for norms and counts, 0.2 absolute for shares).
# The effective step is the parameter update's norm after the optimiser (`update_norm`):
# the gradient's norm before it and how often clipping rescaled it are shown, never
# flagged (`SHOWN`): AdamW largely cancels a gradient's scale.
EFFECTIVE = {"update_norm": ("optim/update_norm", "mean", "ratio"),
             "grad_clip_share": ("grad/clipped_frac", "mean", "share"),
             "step_norm": ("grad/step_norm", "mean", "ratio"),
             "update_share": ("data/update_share", "mean", "share"),
             "rollout_tokens": ("tokens/cumulative", "final", "ratio"),
             "reward_range": (("reward/max", "reward/min"), "range", "ratio"),
             "adv_abs_mean": ("adv/abs_mean", "mean", "ratio"),
             "optim_steps": ("train/updates", "sum", "ratio")}
# the share of optimiser steps that gradient-norm clipping rescaled was `clipped_share`
# (a name that read as PPO's ratio clipping); old experiment files and reports still read
LEGACY_EFFECTIVE = {"clipped_share": "grad_clip_share"}
ALWAYS_CONFOUNDS = ("optim_steps",)  # never a mediator: unequal optimiser steps
SHOWN = ("grad_clip_share", "step_norm")  # pre-optimiser: shown beside the update norm
PRE_CLIP = ("grad/norm", "mean")  # shown, never flagged: two always-clipped arms step alike
TOLERANCE = {"ratio": 1.5, "share": 0.2}


# ---------------------------------------------------------------- reading runs
def reduce_metric(rows: list[dict], metric: str, reduce: str = "final", k: int = 20) -> float:
    """One run's value of `metric`: its last logged value ("final"), the mean of its last k
    ("last_k") or of its first k ("first_k": an early window, e.g. a warm-up), how far the
    last k's mean sits above the lowest mean of k consecutive values anywhere in the run
    ("rebound": 0 for a trace that ends at its low), its ratio to the mean of the first k
    ("last_over_first"), its largest or smallest value ("max": a spike; "min"), its largest
    over the last k ("max_last_k": a bound held at every step after a burn-in), its mean
    over the run ("mean") or its sum ("sum"); its last value minus its first ("gain": with
    the evaluation before training as the first row, what training added)."""
    values = [r[metric] for r in rows if metric in r and r[metric] is not None]
    if not values:
        raise KeyError(f"metric {metric!r} was never logged")
    x = np.asarray(values, dtype=float)
    simple = {"final": lambda: x[-1], "last_k": lambda: x[-k:].mean(),
              "first_k": lambda: x[:k].mean(), "max": x.max,
              "max_last_k": lambda: x[-k:].max(),
              "min": x.min, "mean": x.mean, "sum": x.sum,
              "last_over_first": lambda: x[-k:].mean() / x[:k].mean(),
              "gain": lambda: x[-1] - x[0]}
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


# ---------------------------------------------------------------- tests' arithmetic
def spread_ratio(a: np.ndarray, b: np.ndarray, axis=None):
    with np.errstate(divide="ignore", invalid="ignore"):
        return a.std(axis=axis, ddof=1) / b.std(axis=axis, ddof=1)


def t_interval(x: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    m, n = float(x.mean()), x.size
    half = sps.t.ppf((1 + level) / 2, n - 1) * float(x.std(ddof=1)) / math.sqrt(n)
    return m - half, m + half


def pitman_morgan(a: np.ndarray, b: np.ndarray, level: float = LEVEL
                  ) -> tuple[float, float, float]:
    """(p, lo, hi) of the paired test of equal variances (Pitman 1939; Morgan 1939): the
    arms share seeds, so their values are correlated and an F test (independent samples)
    is the wrong test. p: the t test of corr(a + b, a - b) = 0 (df n - 2); the interval
    of the std ratio sd(a)/sd(b) is its inversion, sqrt(F (K -+ sqrt(K^2 - 1))) with
    F = var a / var b, K = 1 + 2 (1 - r^2) t^2 / (n - 2), r = corr(a, b): it excludes 1
    exactly when p < 1 - level."""
    n = a.size
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    if va == 0 or vb == 0:  # a constant arm: the ratio is 0, inf or undefined
        ratio = math.nan if va == vb else math.sqrt(va / vb) if vb else math.inf
        return (1.0 if va == vb else 0.0), ratio, ratio
    r = float(np.corrcoef(a, b)[0, 1])
    u, v = a + b, a - b
    su, sv = float(u.std(ddof=1)), float(v.std(ddof=1))
    if su == 0 or sv == 0 or va == vb:
        p = 1.0
    else:
        ruv = float(np.clip(np.corrcoef(u, v)[0, 1], -1.0, 1.0))
        p = 0.0 if abs(ruv) == 1 else float(2 * sps.t.sf(
            abs(ruv) * math.sqrt((n - 2) / (1 - ruv ** 2)), n - 2))
    t = float(sps.t.ppf((1 + level) / 2, n - 2))
    k = 1 + 2 * max(0.0, 1 - r * r) * t * t / (n - 2)
    f, root = va / vb, math.sqrt(max(k * k - 1, 0.0))
    return p, math.sqrt(f * (k - root)), math.sqrt(f * (k + root))


@functools.cache
def power_ncp(df: int, level: float = LEVEL, power: float = POWER) -> float:
    """The noncentrality at which a one-sided rejection at the two-sided `level`'s critical
    t value happens with probability `power`."""
    crit = sps.t.ppf((1 + level) / 2, df)
    return float(optimize.brentq(lambda ncp: sps.nct.sf(crit, df, ncp) - power, 0.0, 200.0))


def spread_mde(expect: str | None, r: float, n: int, level: float = LEVEL) -> float:
    """The std ratio the Pitman-Morgan test detects with 80% power at `level` (Fisher's z
    approximation for corr(a + b, a - b), at the arms' correlation r): inf below 4 seeds."""
    if n < 4 or math.isnan(r):
        return math.inf if expect != "lower" else 0.0
    z = (sps.norm.ppf((1 + level) / 2) + sps.norm.ppf(POWER)) / math.sqrt(n - 3)
    rho = math.tanh(z) ** 2
    if rho >= 1:
        return math.inf if expect != "lower" else 0.0
    big = (1 + rho - 2 * rho * r * r) / (1 - rho)
    theta = big + math.sqrt(max(big * big - 1, 0.0))  # the variance ratio above 1
    return math.sqrt(1 / theta) if expect == "lower" else math.sqrt(theta)


def mean_interval(x, level: float = LEVEL) -> tuple[float, float, float, str]:
    """(mean, lo, hi, "paired t"): the t interval of per-seed differences `x` (a
    direction claim's interval, for the numbers a report shows beside its claims)."""
    x = np.asarray(x, dtype=float)
    return float(x.mean()), *t_interval(x, level), "paired t"


def effective_flags(pairs: list[tuple[str, str]], quantities: dict[str, dict[str, float]],
                    expects: list[str], tolerance: dict | None = None) -> list[str]:
    """'name = a vs b' for every effective quantity on which a pair of a claim's arms differ
    beyond the tolerance (ratio 1.5 for norms and counts, 0.2 absolute for shares), unless
    it mediates the treatment (`expects`: the claim's mediators and its parts') or is only
    shown (`SHOWN`: before the optimiser); unequal optimiser steps always count.
    `quantities`: {arm: {name: mean over seeds}}."""
    tol = TOLERANCE | (tolerance or {})
    flags = []
    for x, y in pairs:
        for name, (_, _, how) in EFFECTIVE.items():
            u, v = quantities.get(x, {}).get(name), quantities.get(y, {}).get(name)
            if (name in expects and name not in ALWAYS_CONFOUNDS) or name in SHOWN \
                    or u is None or v is None:
                continue
            if how == "share":
                far = abs(u - v) > tol["share"]
            else:
                lo, hi = sorted((abs(u), abs(v)))
                far = hi > tol["ratio"] * lo if lo > 0 else hi > 0
            if far:
                flags.append(f"{name} = {u:.3g} ({x}) vs {v:.3g} ({y})")
    return flags


def unmeasured(pairs: list[tuple[str, str]], quantities: dict[str, dict[str, float]],
               expects: list[str]) -> list[str]:
    """The flagged effective quantities (not `SHOWN`, not expected) that a pair's runs never
    logged: a confound on them is "not measured" (rows older than the quantity's logging)."""
    out = []
    for x, y in pairs:
        for name in EFFECTIVE:
            if name in SHOWN or (name in expects and name not in ALWAYS_CONFOUNDS):
                continue
            if name not in quantities.get(x, {}) or name not in quantities.get(y, {}):
                out.append(name)
    return list(dict.fromkeys(out))
