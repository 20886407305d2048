"""Judging an experiment's claims against its runs: the values each claim compares, and the
three audits that come before any verdict (docs/reproductions.md):

- config: the claim's arms differ in a resolved config key outside its `differs_in`
  (prefix match; seed, threads, log.* and imports never count) -> "confounded (config: ..)";
- effective: equal configs can still train differently (clipping that rescales one arm's
  steps and not the other's, a filter that changes which samples train, more rollout
  tokens); a difference beyond the experiment's tolerance in a quantity the claim does not
  `expect` -> "confounded (effective: name = a vs b)";
- engagement: every `engaged` entry's level must be reached by the mean over seeds ->
  otherwise "not engaged (arm: metric = value vs level)" or "(not logged: metric)".
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.config import flat_config
from lmpo.experiments.claims import arm_pairs, claim_values, describe_claim
from lmpo.experiments.spec import NEVER_COUNT, covered
from lmpo.experiments.stats import (
    EFFECTIVE,
    PRE_CLIP,
    effective_flags,
    effective_value,
    holm_intervals,
    judge,
    reduce_metric,
)


def finished_rows(data: dict, arm: str) -> dict[int, list[dict]]:
    return {seed: data["runs"][(arm, seed)]["rows"] for seed in data["experiment"].seeds
            if data["runs"][(arm, seed)]["finished"]}


def seed_values(data: dict, arm: str, metric: str, reduce: str, k: int = 20) -> dict[int, float]:
    """{seed: value} over the arm's finished runs that logged `metric`."""
    out = {}
    for seed, rows in finished_rows(data, arm).items():
        try:
            out[seed] = reduce_metric(rows, metric, reduce, k)
        except KeyError:
            pass
    return out


def arm_configs(data: dict) -> dict[str, dict]:
    """{arm: flat resolved config} of each arm's first saved run config."""
    flats = {}
    for (arm, _), run in data["runs"].items():
        if run.get("config") is not None and arm not in flats:
            flats[arm] = flat_config(run["config"])
    return flats


def config_confounds(claim: dict, default_differs: list[str], flats: dict[str, dict]
                     ) -> list[str]:
    """The resolved keys in which a claim's pairs of arms differ outside its differs_in."""
    allowed = list(claim.get("differs_in", default_differs))
    keys = set()
    for x, y in arm_pairs(claim):
        fx, fy = flats.get(x, {}), flats.get(y, {})
        for key in set(fx) | set(fy):
            if key.split(".")[0] in NEVER_COUNT or covered(key, allowed):
                continue
            if repr(fx.get(key, "<unset>")) != repr(fy.get(key, "<unset>")):
                keys.add(key)
    return sorted(keys)


def effective_table(data: dict) -> dict[str, dict[str, dict]]:
    """{arm: {quantity: {"mean", "values"}}} of the effective-behaviour quantities (and the
    pre-clip gradient norm), over each arm's finished seeds; a quantity its runs never
    logged is absent."""
    out: dict[str, dict[str, dict]] = {}
    for arm in data["experiment"].arms:
        runs = finished_rows(data, arm.name)
        out[arm.name] = {}
        for name in [*EFFECTIVE, "pre_clip_norm"]:
            values = []
            for rows in runs.values():
                try:
                    values.append(reduce_metric(rows, *PRE_CLIP) if name == "pre_clip_norm"
                                  else effective_value(rows, name))
                except KeyError:
                    break
            else:
                if values:
                    out[arm.name][name] = {"mean": float(np.mean(values)), "values": values}
    return out


def engagement(claim: dict, data: dict) -> tuple[list[dict], str | None]:
    """Each `engaged` entry measured (the mean over seeds of its reduction), and the first
    failure in words (None when every level is reached)."""
    measured, failure = [], None
    for entry in claim.get("engaged", []):
        bound = "min" if "min" in entry else "max"
        level = float(entry[bound])
        values = seed_values(data, entry["arm"], entry["metric"], entry.get("reduce", "mean"),
                             int(entry.get("k", 20)))
        value = float(np.mean(list(values.values()))) if values else math.nan
        ok = bool(values) and (value >= level if bound == "min" else value <= level)
        measured.append(entry | {"value": value, "ok": ok})
        if not ok and failure is None:
            failure = (f"{entry['arm']}: {entry['metric']} = {value:.3g} vs {bound} {level:.3g}"
                       if values else f"not logged: {entry['metric']}")
    return measured, failure


def unlogged_by(data: dict, claim: dict, per_arm: dict) -> str | None:
    """The engine (verl) whose finished runs of a claim's arm never logged its metric."""
    for arm, values in per_arm.items():
        engines = {run.get("engine", "lmpo") for (a, _), run in data["runs"].items()
                   if a == arm and run["finished"]}
        if not values and engines - {"lmpo"}:
            return ", ".join(sorted(engines - {"lmpo"}))
    return None


def judge_claims(data: dict) -> list[dict]:
    """Every claim of the experiment judged on its finished runs, audits first, with
    Holm-adjusted intervals over the experiment's claims."""
    exp = data["experiment"]
    flats, table = arm_configs(data), effective_table(data)
    means = {arm: {k: v["mean"] for k, v in q.items()} for arm, q in table.items()}
    results, values = [], []
    for claim in exp.claims:
        reduce, k = claim.get("reduce", "final"), int(claim.get("k", 20))
        per_arm = {arm: seed_values(data, arm, claim["metric"], reduce, k)
                   for arm in claim["arms"]}
        seeds, a, b = claim_values(claim, per_arm, exp.seeds)
        keys = config_confounds(claim, exp.differs_in, flats)
        flags = effective_flags(arm_pairs(claim), means, claim.get("expects", []),
                                exp.effective_tolerance)
        confounded = ("config: " + ", ".join(keys)) if keys else \
            ("effective: " + "; ".join(flags)) if flags else None
        measured, not_engaged = engagement(claim, data)
        result = judge(claim, a, b, confounded=confounded, not_engaged=not_engaged)
        engine = unlogged_by(data, claim, per_arm)
        if engine:
            result["verdict"] = f"not logged by {engine}: {claim['metric']}"
        results.append({"claim": describe_claim(claim), "sentence": claim["sentence"],
                        "kind": claim["kind"], "seeds": seeds, "engaged": measured} | result)
        values.append((claim, a, b))
    holm_intervals(results, values)
    return results
