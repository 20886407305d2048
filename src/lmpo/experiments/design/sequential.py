"""Seeds until decided: a group-sequential design over the headline family.

    seeds: {first: 40, start: 5, max: 15, step: 5}   # looks at 5, 10 and 15 seeds

`lmpo compare` runs the first block of seeds (40-44); after each block it judges the
headline family on the seeds so far and adds the next block only while a headline claim
is undecided and `max` is not reached. A look is a function of the per-seed values in
seed order, so `lmpo report` replays every look from the rows.

The design (docs/reproductions.md):

- **Alpha spent across looks** by the Lan-DeMets O'Brien-Fleming spending function
  alpha(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t)), t = n_k / n_max (Lan & DeMets 1983).
  The two-sided boundaries c_k solve P(no crossing before k, crossing at k) =
  alpha(t_k) - alpha(t_{k-1}) for the joint normal of the looks' z statistics (recursive
  numerical integration, Armitage, McPherson & Rowe 1969); the nominal level of look k is
  p_k = 2 (1 - Phi(c_k)), and a claim's paired t test crosses at p <= p_k, i.e. the
  boundary is the t quantile at the look's n - 1 degrees of freedom (not z).
- **Holm within each look** (Maurer & Bretz 2013): with r claims not yet rejected, each
  is tested at look k against the boundary of a design at alpha / r; the smallest p that
  crosses is rejected, r falls by one and the rest are tested again at the new level.
- **A separate stop as "negligible"** (non-binding futility): a claim whose interval at
  the same look and level lies inside +-min_effect stops as negligible.
- **Intervals valid after stopping**: the interval at a look is the repeated confidence
  interval est -+ t_{n-1, 1 - p_k/2} se (Jennison & Turnbull 1989), whose coverage holds
  jointly over the looks, so stopping on it does not invalidate it.

tests/test_sequential.py checks by simulation that the family-wise error over looks and
claims stays at alpha, that the power at a fixed effect is >= 0.9 of a fixed design at
`max` seeds with fewer seeds on average, and that "negligible" is rare at min_effect.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import stats as sps

from lmpo.errors import ConfigError
from lmpo.experiments.design.claims import claim_role
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.seeds import ALPHA

KEYS = {"first", "start", "max", "step"}
GRID = 801  # points of the integration grid per look


def check_design(spec, where: str) -> dict:
    """{first, start, max, step} (first defaults to 0), or a ConfigError."""
    if not isinstance(spec, dict) or not {"start", "max", "step"} <= set(spec) \
            or set(spec) - KEYS:
        raise ConfigError(f"{where}: seeds is a count, a list, or {{first: 40, start: 5, "
                          f"max: 15, step: 5}}, got {spec!r}")
    out = {"first": spec.get("first", 0), **{k: spec[k] for k in ("start", "max", "step")}}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in out.values()) or \
            out["first"] < 0 or out["start"] < 3 or out["step"] < 1 or \
            out["max"] < out["start"] or (out["max"] - out["start"]) % out["step"]:
        raise ConfigError(f"{where}: seeds: start >= 3, step >= 1, first >= 0 and max = "
                          f"start + a multiple of step (whole blocks), got {spec!r}")
    return out


def taken_seeds(out, exp) -> list[int]:
    """The seeds of the looks a `lmpo compare` directory has started (a block is started
    once its last seed's configs are written), at least the first block's."""
    from pathlib import Path

    seeds, sizes = all_seeds(exp.design), look_sizes(exp.design)
    arm = exp.expand().arms[0].name
    taken = sizes[0]
    for n in sizes[1:]:
        if (Path(out) / "configs" / f"{arm}-seed{seeds[n - 1]}.yaml").exists():
            taken = n
    return seeds[:taken]


def look_sizes(design: dict) -> list[int]:
    return list(range(design["start"], design["max"] + 1, design["step"]))


def all_seeds(design: dict) -> list[int]:
    return list(range(design["first"], design["first"] + design["max"]))


def spent(t: float, alpha: float) -> float:
    """Lan-DeMets O'Brien-Fleming: the two-sided alpha spent by information fraction t."""
    return float(2 - 2 * sps.norm.cdf(sps.norm.ppf(1 - alpha / 2) / math.sqrt(t)))


@functools.cache
def boundaries(sizes: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    """The two-sided z boundaries c_k of the looks at `sizes` seeds (information ~ n)."""
    info = np.asarray(sizes, dtype=float)
    t = info / info[-1]
    bounds: list[float] = []
    # the sub-density of the score S_k = Z_k sqrt(I_k) on the continuation region
    width = 12.0 * math.sqrt(info[-1])
    grid = np.linspace(-width, width, GRID)
    dx = grid[1] - grid[0]
    density = None
    previous = 0.0
    for k in range(len(sizes)):
        target = spent(t[k], alpha) - previous
        previous = spent(t[k], alpha)
        if k == 0:
            c = float(sps.norm.ppf(1 - target / 2))
            sd = math.sqrt(info[0])
            density = sps.norm.pdf(grid / sd) / sd
        else:
            sd = math.sqrt(info[k] - info[k - 1])
            scale = math.sqrt(info[k])

            def crossing(c, density=density, sd=sd, scale=scale):
                tail = sps.norm.cdf((-c * scale - grid) / sd) + sps.norm.sf(
                    (c * scale - grid) / sd)
                return float(np.sum(density * tail) * dx)

            c = float(_solve(lambda c, target=target: crossing(c) - target, 0.0, 12.0))
            density = (sps.norm.pdf((grid[:, None] - grid[None, :]) / sd) / sd) @ density * dx
        bounds.append(c)
        density = np.where(np.abs(grid) < c * math.sqrt(info[k]), density, 0.0)
    return tuple(bounds)


def _solve(f, lo: float, hi: float) -> float:
    from scipy import optimize

    if f(hi) > 0:  # nothing left to spend at this look: no crossing
        return hi
    return optimize.brentq(f, lo, hi, xtol=1e-10)


@functools.cache
def nominal(sizes: tuple[int, ...], alpha: float) -> tuple[float, ...]:
    """Each look's nominal two-sided level p_k = 2 (1 - Phi(c_k))."""
    return tuple(float(2 * sps.norm.sf(c)) for c in boundaries(sizes, alpha))


def t_crit(level: float, n: int) -> float:
    return float(sps.t.ppf(1 - level / 2, n - 1))


def look_stats(x: np.ndarray, n: int) -> tuple[float, float, float]:
    """(estimate, se, two-sided p of the paired t test against 0) on the first n values."""
    y = x[:n]
    m, sd = float(y.mean()), float(y.std(ddof=1))
    if sd == 0:
        return m, 0.0, (1.0 if m == 0 else 0.0)
    se = sd / math.sqrt(n)
    return m, se, float(2 * sps.t.sf(abs(m / se), n - 1))


def run_design(values: list[np.ndarray], min_effects: list[float | None], sizes: list[int],
               alpha: float = ALPHA, held: list[set[int]] | None = None) -> dict:
    """Replay the design over a family's per-seed values (one array per claim, in seed
    order; a claim's statistic is tested against 0). Returns {looks: [{n, alpha_spent,
    levels: {r: p_k}}], claims: [{status: rejected | negligible | undecided, look, n,
    level, estimate, ci}], stopped: decided | max seeds | more seeds needed, next}.
    `held[i]`: the looks (0-based) at which claim i may not be decided, because a premise
    gating it is undecided there: it stays open (`held` in its record) and the runs go on."""
    m, taken = len(values), max((v.size for v in values), default=0)
    held = held or [set() for _ in range(m)]
    usable = [n for n in sizes if n <= taken]
    status = [{"status": "undecided"} for _ in range(m)]
    record, stopped = [], "more seeds needed"
    for k, n in enumerate(usable):
        stats = [look_stats(v, n) for v in values]
        t = n / sizes[-1]
        record.append({"n": n, "alpha_spent": spent(t, alpha)})
        while True:  # Holm within the look
            open_ = [i for i in range(m) if status[i]["status"] == "undecided"
                     and k not in held[i]]
            r = sum(s["status"] != "rejected" for s in status)
            if not open_ or r == 0:
                break
            level = nominal(tuple(sizes), alpha / r)[k]
            i = min(open_, key=lambda j: stats[j][2])
            if stats[i][2] > level:
                break
            status[i] = decided("rejected", k, n, level, stats[i])
        r = max(1, sum(s["status"] != "rejected" for s in status))
        level = nominal(tuple(sizes), alpha / r)[k]
        record[-1]["level"] = level
        for i in range(m):
            if status[i]["status"] != "undecided":
                continue
            est, se, _ = stats[i]
            half = t_crit(level, n) * se
            if min_effects[i] is not None and -min_effects[i] < est - half and \
                    est + half < min_effects[i] and k not in held[i]:
                status[i] = decided("negligible", k, n, level, stats[i])
            else:
                status[i] = {"status": "undecided", "look": k, "n": n, "level": level,
                             "estimate": est, "ci": [est - half, est + half]}
                if k in held[i]:
                    status[i]["held"] = "a premise gating it is undecided at this look"
        if all(s["status"] != "undecided" for s in status):
            stopped = "decided"
            break
        if n == sizes[-1]:
            stopped = "max seeds"
    nxt = None
    if stopped == "more seeds needed":
        nxt = next((s for s in sizes if s > (usable[-1] if usable else 0)), None)
    return {"looks": record, "claims": status, "stopped": stopped, "next": nxt}


def decided(what: str, k: int, n: int, level: float, stats: tuple) -> dict:
    est, se, _ = stats
    half = t_crit(level, n) * se
    return {"status": what, "look": k, "n": n, "level": level, "estimate": est,
            "ci": [est - half, est + half]}


def sequential_design(value, claims: list, where: str, conditions=None) -> dict | None:
    """The sequential design of `seeds: {...}`, whose headline claims must be tested by a
    paired t test (direction, threshold, dose_response), or None."""
    if not isinstance(value, dict):
        return None
    design = check_design(value, where)
    primaries = any(isinstance(c, dict) and c.get("primary") for c in claims)
    levels = list((conditions or {}).get("levels") or {}) if isinstance(conditions, dict) \
        else []

    def at_l0(c: dict) -> bool:
        at = c.get("at", "all")
        return not levels or at == "all" or levels[0] in ([at] if isinstance(at, str) else at)

    heads = [i for i, c in enumerate(claims) if isinstance(c, dict)
             and claim_role(c, primaries, at_l0(c)) == "headline"]
    if not heads:
        raise ConfigError(f"{where}: sequential seeds decide headline claims, and every "
                          "claim here is descriptive: give a fixed seed list")
    bad = [i for i in heads if not claim_kind(claims[i]["kind"]).sequential_headline]
    if bad:
        kinds = ", ".join(dict.fromkeys(claims[i]["kind"] for i in bad))
        raise ConfigError(f"{where}: sequential seeds decide headline claims by a paired t "
                          f"test; claims {bad} ({kinds}) cannot be headline claims "
                          "here: mark the others `primary: true`, or give a fixed seed list")
    return design
