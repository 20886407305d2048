"""Statistics over seeds: summaries with bootstrap CIs, and claims with paired verdicts.

Seeds are the unit: each run contributes one number per metric (its final value,
or the mean of its last k logged values). A summary is the mean, the std (ddof=1)
and a 95% percentile bootstrap CI of the mean (seeded numpy, 10,000 resamples).
A claim compares two arms that share seeds: the bootstrap resamples seed
*indices*, so the pairing is kept. Verdicts (docs/reproductions.md states them):

- direction: mean(a) - mean(b), expected > 0 ("greater") or < 0 ("less"). With four
  arms [a, b, c, d] it compares gains: (a - b) - (c - d), each difference taken within
  a seed (e.g. "EBPO's gain over GRPO is larger at G=2 than at G=8").
  "holds": right sign and the CI excludes 0; "direction only": right sign, CI
  includes 0; wrong sign: "contradicted" if the CI excludes 0, else "inconclusive".
- threshold: mean(b) / mean(a) ("ratio"), mean(b) - mean(a) ("difference"), or, for
  a claim on one arm, mean(a) ("value") against `bound` ("below": <=, "above": >=).
  "holds": the whole CI passes; "direction only": the point estimate passes;
  otherwise "not met".
- equivalence: mean(a) - mean(b), or mean(a) / mean(b) - 1 (`statistic: ratio`, a
  relative margin). "holds": the CI lies within +-margin; otherwise "not shown".
- spread: std(a) / std(b), expected < 1 ("lower") or > 1 ("higher"); verdicts as
  for direction, around 1.

With fewer than 3 seeds every verdict is "insufficient seeds". At 3 seeds a 95%
bootstrap interval covers the true mean far less often than 95% (the resamples
of 3 values are few and too narrow): the report says so.
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.errors import ConfigError

RESAMPLES = 10_000
LEVEL = 0.95
SEED = 0
MIN_SEEDS = 3
REDUCERS = ("final", "last_k", "rebound", "last_over_first", "max", "min")
EXPECT = {"direction": ("greater", "less"), "threshold": ("below", "above"),
          "equivalence": (None,), "spread": ("lower", "higher")}


# ---------------------------------------------------------------- reading runs
def reduce_metric(rows: list[dict], metric: str, reduce: str = "final", k: int = 20) -> float:
    """One run's value of `metric`: its last logged value ("final"), the mean of its last k
    ("last_k"), how far that mean sits above the lowest mean of k consecutive values
    anywhere in the run ("rebound": 0 for a trace that ends at its low), or its ratio to
    the mean of the first k ("last_over_first"), or its largest or smallest value ("max": a
    spike; "min")."""
    values = [r[metric] for r in rows if metric in r and r[metric] is not None]
    if not values:
        raise KeyError(f"metric {metric!r} was never logged")
    if reduce == "final":
        return float(values[-1])
    if reduce == "last_k":
        tail = values[-k:]
        return float(sum(tail) / len(tail))
    if reduce == "rebound":
        x = np.asarray(values, dtype=float)
        w = min(k, x.size)
        means = np.convolve(x, np.ones(w) / w, mode="valid")
        return float(means[-1] - means.min())
    if reduce == "max":
        return float(max(values))
    if reduce == "min":
        return float(min(values))
    if reduce == "last_over_first":
        head, tail = values[:k], values[-k:]
        return float((sum(tail) / len(tail)) / (sum(head) / len(head)))
    raise ValueError(f"unknown reduce {reduce!r}; valid: {', '.join(REDUCERS)}")


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


# ---------------------------------------------------------------- claims
def check_claim(claim: dict, arms: list[str], where: str) -> None:
    """ConfigError for a malformed claim (before any run starts)."""
    kind = claim.get("kind")
    if kind not in EXPECT:
        raise ConfigError(f"{where}: kind must be one of {', '.join(EXPECT)}, got {kind!r}")
    need = {"kind", "metric", "arms", "sentence"} | ({"expect"} if kind != "equivalence" else
                                                     {"margin"})
    if kind == "threshold":
        need |= {"bound", "statistic"}
    missing = sorted(need - set(claim))
    if missing:
        raise ConfigError(f"{where}: a {kind} claim needs {missing}")
    allowed = need | {"reduce", "k", "label"} | ({"statistic"} if kind == "equivalence"
                                                 else set())
    extra = sorted(set(claim) - allowed)
    if extra:
        raise ConfigError(f"{where}: unknown claim key(s) {extra}; valid: {sorted(allowed)}")
    statistics = {"threshold": ("ratio", "difference", "value"),
                  "equivalence": ("difference", "ratio")}.get(kind)
    if statistics and claim.get("statistic", "difference") not in statistics:
        raise ConfigError(f"{where}: statistic must be one of {statistics} for a {kind} claim")
    pair, one = claim["arms"], claim.get("statistic") == "value"
    if kind == "direction" and isinstance(pair, list) and len(pair) == 4:
        if not (all(a in arms for a in pair) and pair[0] != pair[1] and pair[2] != pair[3]):
            raise ConfigError(f"{where}: a comparison of gains names four arms of {arms} "
                              f"(a - b vs c - d), got {pair!r}")
    elif one and not (isinstance(pair, list) and len(pair) == 1 and pair[0] in arms):
        raise ConfigError(f"{where}: a claim on a value names one arm of {arms}, got {pair!r}")
    elif not one and not (isinstance(pair, list) and len(pair) == 2 and
                          all(a in arms for a in pair) and pair[0] != pair[1]):
        raise ConfigError(f"{where}: arms must name two different arms of {arms}, got {pair!r}")
    if kind != "equivalence" and claim["expect"] not in EXPECT[kind]:
        raise ConfigError(f"{where}: expect must be one of {EXPECT[kind]} for a {kind} claim")
    if claim.get("reduce", "final") not in REDUCERS:
        raise ConfigError(f"{where}: reduce must be one of {REDUCERS}")
    if kind == "equivalence" and not claim["margin"] > 0:
        raise ConfigError(f"{where}: margin must be > 0")


def _statistic(kind: str, claim: dict, a: np.ndarray, b: np.ndarray, axis=None):
    """The claim's statistic of (possibly resampled, [R, n]) paired arrays."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "equivalence" and claim.get("statistic") == "ratio":
            return a.mean(axis=axis) / b.mean(axis=axis) - 1.0
        if kind in ("direction", "equivalence"):
            return a.mean(axis=axis) - b.mean(axis=axis)
        if kind == "threshold":
            if claim["statistic"] == "value":
                return a.mean(axis=axis)
            if claim["statistic"] == "ratio":
                return b.mean(axis=axis) / a.mean(axis=axis)
            return b.mean(axis=axis) - a.mean(axis=axis)
        return a.std(axis=axis, ddof=1) / b.std(axis=axis, ddof=1)  # spread


def verdict(kind: str, claim: dict, point: float, lo: float, hi: float) -> str:
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
    margin = float(claim["margin"])  # equivalence
    return "holds" if -margin <= lo and hi <= margin else "not shown"


def claim_values(claim: dict, values: dict[str, dict[int, float]], seeds: list[int]
                 ) -> tuple[list[int], list[float], list[float] | None]:
    """(seeds every named arm has, a, b): the per-seed values a claim compares, from
    {arm: {seed: value}}. One arm: b is None (a value against a bound); four arms
    [a, b, c, d]: a - b and c - d, each within a seed."""
    arms = claim["arms"]
    kept = [s for s in seeds if all(s in values[arm] for arm in arms)]
    col = [[values[arm][s] for s in kept] for arm in arms]
    if len(arms) == 1:
        return kept, col[0], None
    if len(arms) == 4:
        return kept, [x - y for x, y in zip(col[0], col[1], strict=True)], \
            [x - y for x, y in zip(col[2], col[3], strict=True)]
    return kept, col[0], col[1]


def evaluate_claim(claim: dict, a, b=None) -> dict:
    """The claim's point estimate, paired bootstrap CI and verdict for per-seed values a, b
    (same seeds, same order; a claim on one arm's value has no b)."""
    a = np.asarray(a, dtype=float)
    b = a if b is None else np.asarray(b, dtype=float)
    kind = claim["kind"]
    if a.shape != b.shape:
        raise ValueError(f"paired values need the same seeds: {a.size} vs {b.size}")
    out = {"n": int(a.size)}
    if a.size < MIN_SEEDS:
        point = float(_statistic(kind, claim, a, b)) if a.size > (kind == "spread") else math.nan
        return out | {"effect": point, "ci": [math.nan, math.nan],
                      "verdict": "insufficient seeds"}
    point = float(_statistic(kind, claim, a, b))
    idx = _rng().integers(0, a.size, size=(RESAMPLES, a.size))
    lo, hi = percentile_ci(np.asarray(_statistic(kind, claim, a[idx], b[idx], axis=1)))
    return out | {"effect": point, "ci": [lo, hi], "verdict": verdict(kind, claim, point, lo, hi)}


def describe_claim(claim: dict) -> str:
    arms = claim["arms"]
    a, b = (arms * 2)[:2] if len(arms) < 4 else (f"({arms[0]} - {arms[1]})",
                                                  f"({arms[2]} - {arms[3]})")
    k = claim.get("k", 20)
    m = claim["metric"] + {"last_k": f" (last {k})", "rebound": f" (rebound over {k})",
                           "last_over_first": f" (last {k} / first {k})",
                           "max": " (max over the run)"}.get(
        claim.get("reduce", "final"), "")
    kind = claim["kind"]
    if kind == "direction":
        return f"{m}: {a} {'>' if claim['expect'] == 'greater' else '<'} {b}"
    if kind == "threshold":
        stat = {"ratio": f"{b} / {a}", "difference": f"{b} - {a}", "value": a}[
            claim["statistic"]]
        return f"{m}: {stat} {'<=' if claim['expect'] == 'below' else '>='} {claim['bound']}"
    if kind == "equivalence":
        if claim.get("statistic") == "ratio":
            return f"{m}: |{a} / {b} - 1| <= {claim['margin']}"
        return f"{m}: |{a} - {b}| <= {claim['margin']}"
    return f"{m}: std({a}) {'<' if claim['expect'] == 'lower' else '>'} std({b})"
