"""One bound rule: a claim's `min_effect` (a direction claim) or `margin` (an equivalence
claim on a difference) is **25% of the comparator's gain over its warm start**, read on
the comparator's own seeds of a premise arm (an arm with `seed_offset` whose config is the
comparator's), so the bound never reads the claim's own numbers:

- a metric the evaluation before training logs (accuracy, held-out reward): the claim's
  reading of the comparator (its reduce, or at its matched drift level) minus that
  evaluation's value;
- any other metric: its change over the run, the claim's reading minus the mean of the
  run's first k rows (k = the claim's k, default 20).

Without such a premise arm the comparator's own seeds give the gain (said in the bound's
`seeds`). With seeds until decided, the first look's seeds give it, so the bound is fixed
before any later look and the design's negligible stops read one bound throughout. The
gain's magnitude counts: a comparator that loses sets the bound as one that gains.

Another bound only with a cited reason in the file (`bound_source:`): the declared number
is kept and the rule's shown beside it. A claim on a ratio (its bound is already a share),
a threshold, spread or trend claim keeps its declared bound.

The report prints each bound in the metric's units, as a multiple of the paired
differences' SD and as a share of the reference gain (`describe`).
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.design.keys import NEVER_COUNT
from lmpo.experiments.stats.kinds import claim_kind

SHARE = 0.25  # of the comparator's gain over its warm start


def bound_key(claim: dict) -> str | None:
    """The claim's key the rule sets (min_effect, margin), or None: the rule does not apply
    (a premise, a ratio, a threshold, spread or trend claim)."""
    kind = claim_kind(claim["kind"])
    sized = kind.negligible_band or kind.bound_key == "margin"  # direction, equivalence
    if claim.get("role") == "premise" or kind.over_levels or len(claim["arms"]) != 2 \
            or claim.get("statistic") == "ratio" or not sized:
        return None
    return kind.bound_key


def reference_arm(data: dict, comparator: str, flats: dict) -> tuple[str, str]:
    """(the arm whose seeds give the reference gain, which seeds): a premise arm running
    the comparator's config on its own seeds, else the comparator itself."""
    offsets = {a.name: a.seed_offset for a in data["experiment"].arms}

    def counted(flat: dict) -> dict:
        return {k: repr(v) for k, v in flat.items() if k.split(".")[0] not in NEVER_COUNT}

    mine = counted(flats.get(comparator, {}))
    for arm, offset in offsets.items():
        if offset and arm != comparator and mine and counted(flats.get(arm, {})) == mine:
            return arm, f"{arm} (the comparator on its own seeds)"
    return comparator, f"{comparator} (the comparator's own seeds: no premise arm runs it)"


def seed_gains(data: dict, claim: dict, arm: str, readings: dict[int, float]) -> list[float]:
    """Per seed of `arm`, its reading (`readings`) minus its warm start's value (the
    evaluation before training) or, for a metric that has none, its first k rows' mean."""
    from lmpo.experiments.stats.seeds import reduce_metric

    metric, k = claim["metric"], int(claim.get("k", 20))
    out = []
    for seed, value in readings.items():
        run = data["runs"][(arm, seed)]
        if claim.get("reduce") == "gain":
            out.append(value)
            continue
        start = (run.get("before_row") or {}).get(metric)
        if start is None:
            try:
                start = reduce_metric(run["rows"], metric, "first_k", k)
            except KeyError:
                continue
        out.append(value - float(start))
    return out


def apply_rule(claim: dict, data: dict, flats: dict, read) -> dict:
    """The claim with its bound set by the rule (or kept, with its cited reason), and
    `bound`: {value, rule, declared, reference, seeds, ref_gain, n}. `read(claim, arm)`:
    {seed: the claim's reading of that arm}."""
    key = bound_key(claim)
    if key is None:
        return claim
    ref, seeds = reference_arm(data, claim["arms"][1], flats)
    readings = read(claim, ref)
    exp = data["experiment"]
    if exp.design:  # fixed at the first look: later seeds never move the bound
        first = set(exp.seeds[:exp.design["start"]])
        readings = {s: v for s, v in readings.items() if s in first}
    gains = seed_gains(data, claim, ref, readings)
    gain = float(np.mean(gains)) if gains else math.nan
    rule = SHARE * abs(gain)
    declared = claim.get(key)
    info = {"key": key, "declared": declared, "reference": ref, "seeds": seeds,
            "ref_gain": gain, "n": len(gains), "rule_value": rule}
    if claim.get("bound_source"):
        why = "declared: " + claim["bound_source"]
    elif not gains or not rule > 0:
        why = "declared (no reference gain to apply the rule to)"
    else:
        why = f"{100 * SHARE:g}% of the comparator's gain over its warm start"
        return claim | {key: rule, "effect_bound": info | {"value": rule, "rule": why}}
    return claim | {"effect_bound": info | {"value": declared, "rule": why}}


def describe(bound: dict, a, b) -> dict:
    """The bound with its size as a multiple of the paired differences' SD (`sd_multiple`)
    and as a share of the reference gain (`gain_share`)."""
    if not bound or bound.get("value") is None:
        return bound
    out = dict(bound)
    x = np.asarray(a, dtype=float) - np.asarray(b, dtype=float) if b is not None else None
    sd = float(np.std(x, ddof=1)) if x is not None and x.size >= 2 else math.nan
    out["paired_sd"] = sd
    out["sd_multiple"] = bound["value"] / sd if sd > 0 else math.nan
    g = bound.get("ref_gain")
    out["gain_share"] = bound["value"] / abs(g) if g and not math.isnan(g) else math.nan
    return out
