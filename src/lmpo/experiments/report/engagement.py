"""A claim's engagement: how far its treatment moved the update, measured on the same batch.

The first arm of a claim's pair logs, on its own batches, the distance of its update from
the other arm's parts (`lmpo.trainer.comparators`, `lmpo.experiments.design.comparators`):
for a loss or an estimator, the total variation between the two policy-loss terms' per-token
gradient weights (`shadow/<arm>/weight_tv`); for a rollout controller, the share of
samples whose stop decision would differ (`shadow/<arm>/stop_diff`), or, where the two
controllers differ in how a stop is scored (r_fail, a bootstrapped stop), the weight
distance of the update with the stopped responses scored the comparator's way. A claim's
engagement is that distance over the claim's own window (the last k steps its metric
reads, else the whole run), one value per seed, with the claim's interval method:

    engagement: {comparator, metric, value, ci: [lo, hi], floor, n, values}
                or {status: "not measured", reason}

The rule (`lmpo.experiments.stats.seeds.judge`): a claim reads "not engaged" only when the
engagement's upper bound is below the floor *and* the claim's labelling interval includes
the null; an equivalence claim below the floor always reads "not engaged" (equal by
construction is no evidence). A significant result keeps its label, its engagement
beside it.

DEFAULT_FLOOR is calibrated, not guessed: experiments/results/engagement_floor/ (made by
experiments/engagement_floor.py) records, on the testbed, the same-batch distance and the
cosine between the two parameter gradients for a negative control (identical losses),
a positive control (PPO-clip vs REINFORCE) and pairs between; the floor is the distance
below which the parameter gradient's direction moves by less than 1% of the positive
control's (docs/reproductions.md).
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.design.comparators import (
    TWIN_PREFIX,
    engagement_metric,
    unreplayable,
)
from lmpo.experiments.design.conditions import split_arm
from lmpo.experiments.stats.seeds import mean_interval, reduce_metric

DEFAULT_FLOOR = 0.001  # experiments/results/engagement_floor.json: 0.001


def not_measured(reason: str) -> dict:
    return {"status": "not measured", "reason": reason}


def window(claim: dict) -> tuple[str, int]:
    """(reduce, k) of the engagement over the claim's own window: its last (first) k steps
    where the claim reads them, else the whole run."""
    if claim.get("reduce") in ("last_k", "first_k"):
        return claim["reduce"], int(claim.get("k", 20))
    return "mean", 20


def pair_values(data: dict, x: str, y: str, claim: dict, flats: dict
                ) -> tuple[dict[int, float] | None, str, str]:
    """({seed: engagement} or None, metric, reason when None) of arm x's runs against the
    parts of arm y."""
    name = split_arm(y)[0]
    keys = unreplayable(flats.get(x, {}), flats.get(y, {}))
    if keys:
        return None, "", (f"the arms also differ in {', '.join(keys)}, which no same-batch "
                          "comparator replays")
    runs = {s: r for (a, s), r in data["runs"].items() if a == x and r["finished"]}
    if not runs:
        return None, "", "no finished run"
    config = next(iter(runs.values())).get("config")
    if not config:
        return None, "", f"the runs of {x} saved no config"
    spec = ((config.get("log") or {}).get("comparators") or {}).get(name)
    if spec is None:
        if all(flats.get(x, {}).get(k) == flats.get(y, {}).get(k)
               for k in set(flats.get(x, {})) | set(flats.get(y, {}))
               if k.split(".")[0] in ("loss", "advantage", "controller")):
            return {s: 0.0 for s in runs}, "identical parts", ""
        return None, "", f"the runs of {x} did not log a comparator {name!r}"
    return logged_distance(runs, x, name, spec, claim)


def logged_distance(runs: dict, x: str, name: str, spec: dict, claim: dict
                    ) -> tuple[dict[int, float] | None, str, str]:
    """({seed: distance} or None, metric, reason when None): what arm x's `runs` logged of
    their comparator `name` (parts `spec`) over the claim's window."""
    metric = f"shadow/{name}/{engagement_metric(spec)}"
    if metric.endswith("/stop_diff") and any(f"shadow/{name}/adv_tv" in r
                                             for run in runs.values() for r in run["rows"][:1]):
        # the controllers score a stop differently: the comparator rescored the run's stops
        # (it logs adv_tv only then), so its weight_tv measures what the scoring changes; a
        # controller that scores alike leaves the weights as they are (weight_tv 0 by
        # construction), and its stop decisions are the measure
        metric = f"shadow/{name}/weight_tv"
    reduce, k = window(claim)
    values = {}
    for seed, run in runs.items():
        try:
            values[seed] = reduce_metric(run["rows"], metric, reduce, k)
        except KeyError:
            return None, metric, f"the runs of {x} did not log {metric}"
    return values, metric, ""


def claim_engagement(data: dict, claim: dict, flats: dict, floor: float,
                     pairs: list[tuple[str, str]]) -> dict:
    """The claim's engagement record over `pairs` (per seed, the largest of the pairs'
    distances: every pair must be below the floor for the claim to be unengaged)."""
    if not pairs:
        return not_measured("a claim on one arm's value names no comparator")
    per_pair, metrics = [], []
    for x, y in pairs:
        values, metric, reason = pair_values(data, x, y, claim, flats)
        if values is None:
            return not_measured(reason)
        per_pair.append(values)
        metrics.append(metric)
    seeds = sorted(set.intersection(*(set(v) for v in per_pair)))
    if not seeds:
        return not_measured("no seed has every pair's runs")
    vals = np.array([max(v[s] for v in per_pair) for s in seeds], dtype=float)
    if vals.size >= 2:
        point, lo, hi, method = mean_interval(vals)
    else:
        point, lo, hi, method = float(vals.mean()), math.nan, math.nan, None
    return {"comparator": " and ".join(y for _, y in pairs), "metric": " / ".join(
        dict.fromkeys(metrics)), "value": point, "ci": [lo, hi], "floor": floor,
        "n": int(vals.size), "values": vals.tolist(), "method": method}


def twin_distance(data: dict, claim: dict, floor: float) -> dict | None:
    """How far the claim's first arm's update is from its method's ablated twin on the same
    batches (the `twin_<method>` comparators its runs logged, for the methods the claim's
    other arm does not share), as an engagement record; None where its runs logged none
    (the experiment did not ask for twins)."""
    arms = claim["arms"]
    if len(arms) < 2:
        return None
    runs = {s: r for (a, s), r in data["runs"].items() if a == arms[0] and r["finished"]}
    config = next(iter(runs.values())).get("config") or {} if runs else {}
    other = next((r.get("config") or {} for (a, _), r in data["runs"].items()
                  if a == arms[1] and r["finished"]), {})
    shared = {(other.get(part) or {}).get("name") for part in ("loss", "advantage",
                                                                  "controller")}
    logged = (config.get("log") or {}).get("comparators") or {}
    twins = {n: s for n, s in logged.items()
             if n.startswith(TWIN_PREFIX) and n[len(TWIN_PREFIX):] not in shared}
    twins = twins or twin_arms(config, logged, shared)
    if not twins:
        return None
    per_twin = []
    for name, spec in twins.items():
        values, metric, reason = logged_distance(runs, arms[0], name, spec, claim)
        if values is None:
            return not_measured(reason)
        per_twin.append((values, metric))
    seeds = sorted(set.intersection(*(set(v) for v, _ in per_twin)))
    vals = np.array([max(v[s] for v, _ in per_twin) for s in seeds], dtype=float)
    point, lo, hi, method = mean_interval(vals) if vals.size >= 2 else (
        float(vals.mean()) if vals.size else math.nan, math.nan, math.nan, None)
    return {"comparator": " and ".join(twins), "metric": " / ".join(m for _, m in per_twin),
            "value": point, "ci": [lo, hi], "floor": floor, "n": int(vals.size),
            "values": vals.tolist(), "method": method}


def twin_arms(config: dict, logged: dict, shared: set) -> dict[str, dict]:
    """Of an arm's logged comparators (runs made before twins were asked for), those that
    are one of its methods' ablated twins (registry metadata `twin`: the same parts by
    name, a same-named twin's hyper-parameters equal), for the methods `shared` lacks."""
    from lmpo.advantages import advantage_meta
    from lmpo.losses import loss_meta
    from lmpo.rollout import CONTROLLERS

    metas = {"loss": loss_meta, "advantage": advantage_meta, "controller": CONTROLLERS.meta}
    out = {}
    for part, meta in metas.items():
        name = (config.get(part) or {}).get("name")
        twin = meta(name)["twin"] if name else None
        if not twin or name in shared:
            continue
        for comp, spec in logged.items():
            if set(spec) == set(twin) and all(
                    (spec[k] or {}).get("name") == sub["name"] and all(
                        (spec[k].get("hparams") or {}).get(h) == v
                        for h, v in (sub.get("hparams") or {}).items())
                    for k, sub in twin.items()):
                out[comp] = spec
    return out


def below_floor(eng: dict) -> str | None:
    """The reason a measured engagement is practically zero (its upper bound below the
    floor), or None."""
    if eng.get("status") == "not measured" or math.isnan(eng["ci"][1]):
        return None
    if eng["ci"][1] < eng["floor"]:
        return (f"same-batch {eng['metric']} vs {eng['comparator']}: {eng['value']:.3g} "
                f"[{eng['ci'][0]:.3g}, {eng['ci'][1]:.3g}] < floor {eng['floor']:g}")
    return None


def part_mediators(flat_x: dict, flat_y: dict) -> list[str]:
    """What the parts two arms differ in change by design (registry metadata `mediates` of
    both arms' loss, estimator and controller where that part differs; the batch filter's
    `MEDIATES` where its keys differ)."""
    from lmpo.advantages import advantage_meta
    from lmpo.losses import loss_meta
    from lmpo.rollout import CONTROLLERS
    from lmpo.trainer.filters import MEDIATES

    meta = {"loss": loss_meta, "advantage": advantage_meta, "controller": CONTROLLERS.meta}
    differ = {k for k in set(flat_x) | set(flat_y)
              if repr(flat_x.get(k, "<unset>")) != repr(flat_y.get(k, "<unset>"))}
    out = []
    for section, lookup in meta.items():
        if any(k.split(".")[0] == section for k in differ):
            for flat in (flat_x, flat_y):
                name = flat.get(f"{section}.name")
                try:
                    out += list(lookup(name)["mediates"]) if name else []
                except KeyError:
                    pass
    for key, quantities in MEDIATES.items():
        if key in differ:
            out += list(quantities)
    return list(dict.fromkeys(out))
