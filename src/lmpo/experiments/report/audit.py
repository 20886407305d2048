"""Judging an experiment's claims against its runs: the values each claim compares, and the
three audits that come before any verdict (docs/reproductions.md):

- config: the claim's arms differ in a resolved config key outside its `differs_in`
  (prefix match; seed, threads, log.* and imports never count) -> "confounded (config: ..)";
- effective: equal configs can still train differently (clipping that rescales one arm's
  steps and not the other's, more rollout tokens); a difference beyond the experiment's
  tolerance in a quantity that is not one of the treatment's mediators (the claim's
  `mediators`, and what the differing parts declare they change: `mediates`) ->
  "confounded (effective: name = a vs b)"; unequal optimiser steps always count;
- engagement: the pair's same-batch distance (`lmpo.experiments.report.engagement`); below the
  floor, with an interval that includes the null -> "not engaged". A fixed `engaged`
  level (with its `source`) is judged the same way: a significant result is never hidden.
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.config import flat_config
from lmpo.experiments.design.claims import arm_pairs, claim_values, describe_claim, mediators
from lmpo.experiments.design.dose import (
    level_results,
    seed_effects,
    slopes,
    trend_claim,
    trend_values,
)
from lmpo.experiments.design.keys import NEVER_COUNT, covered
from lmpo.experiments.design.premises import gate
from lmpo.experiments.design.premises import status as premise_status
from lmpo.experiments.report.bounds import describe as describe_bound
from lmpo.experiments.report.engagement import (
    DEFAULT_FLOOR,
    below_floor,
    claim_engagement,
    not_measured,
    part_mediators,
    twin_distance,
)
from lmpo.experiments.report.looks import (
    look_effects,
    premise_looks,
    sequential_looks,
    sequential_record,
)
from lmpo.experiments.report.readings import (
    claims_under_rule,
    finished_rows,
    matched_values,
    seed_values,
)
from lmpo.experiments.stats.kinds import claim_kind, claim_p
from lmpo.experiments.stats.labels import judge
from lmpo.experiments.stats.multiplicity import family_levels
from lmpo.experiments.stats.seeds import (
    ALPHA,
    EFFECTIVE,
    PRE_CLIP,
    effective_flags,
    effective_value,
    reduce_metric,
    unmeasured,
)


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


def claim_pairs(claim: dict) -> list[tuple[str, str]]:
    """The pairs whose same-batch distance is the claim's engagement: (first arm, its
    comparator) for a claim that names one, else the claim's own pairs."""
    if "comparator" in claim:
        return [(claim["arms"][0], claim["comparator"])]
    return arm_pairs(claim)


def claim_audits(claim: dict, pairs: list[tuple[str, str]], exp, flats: dict, means: dict
                 ) -> str | None:
    """The claim's confound, in words (config first, then effective behaviour outside the
    treatment's mediators), or None."""
    keys = sorted({k for x, y in pairs for k in config_confounds(
        claim | {"arms": [x, y]}, exp.differs_in, flats)})
    if keys:
        return "config: " + ", ".join(keys)
    allowed = set(mediators(claim))
    for x, y in pairs:
        allowed |= set(part_mediators(flats.get(x, {}), flats.get(y, {})))
    flags = effective_flags(pairs, means, sorted(allowed), exp.effective_tolerance)
    return ("effective: " + "; ".join(flags)) if flags else None


def prepare(claim: dict, data: dict, flats: dict, means: dict, floor: float) -> dict:
    """Everything a claim's verdict needs but its Holm level: values, audits, engagement."""
    exp = data["experiment"]
    reduce, k = claim.get("reduce", "final"), int(claim.get("k", 20))
    floor = float(claim.get("engaged_floor", floor))
    if claim_kind(claim["kind"]).over_levels:
        return prepare_dose(claim, data, flats, means, floor)
    unreached: dict = {}
    if "matched" in claim:
        per_arm, unreached = matched_values(data, claim)
    else:
        per_arm = {arm: seed_values(data, arm, claim["metric"], reduce, k)
                   for arm in claim["arms"]}
    seeds, a, b = claim_values(claim, per_arm, exp.seeds)
    eng = claim_engagement(data, claim, flats, floor, claim_pairs(claim))
    fixed, failure = engagement(claim, data)
    reason = below_floor(eng) or (f"{failure} (source: {fixed_source(claim)})"
                                  if failure else None)
    twin = twin_distance(data, claim, floor)
    expects = set(mediators(claim))
    for x, y in arm_pairs(claim):
        expects |= set(part_mediators(flats.get(x, {}), flats.get(y, {})))
    return {"unmeasured": unmeasured(arm_pairs(claim), means, sorted(expects)),
            "claim": claim, "seeds": seeds, "a": a, "b": b, "p": claim_p(claim, a, b),
            "confounded": claim_audits(claim, arm_pairs(claim), exp, flats, means),
            "engagement": eng, "fixed": fixed, "not_engaged": reason, "twin": twin,
            "inert": below_floor(twin) if twin else None,
            "engine": unlogged_by(data, claim, per_arm), "unreached": unreached}


def prepare_dose(claim: dict, data: dict, flats: dict, means: dict, floor: float) -> dict:
    """A dose_response claim: effects per level and seed, the trend's per-seed values, each
    level's engagement and x, the audits over every level's pair."""
    exp = data["experiment"]
    reduce, k = claim.get("reduce", "final"), int(claim.get("k", 20))
    levels = list(claim["by_level"])
    doses = np.array([exp.conditions["levels"][lv]["dose"] for lv in levels])
    per_level = {lv: tuple(seed_values(data, arm, claim["metric"], reduce, k) for arm in pair)
                 for lv, pair in claim["by_level"].items()}
    seeds, effects = seed_effects(per_level, exp.seeds)
    pairs = [tuple(pair) for pair in claim["by_level"].values()]
    info = []
    for lv, pair in claim["by_level"].items():
        eng = claim_engagement(data, claim, flats, floor, [tuple(pair)])
        x = None
        if claim.get("x"):
            xs = [v for arm in pair for v in seed_values(data, arm, claim["x"], reduce,
                                                         k).values()]
            x = float(np.mean(xs)) if xs else None
        info.append({"level": lv, "dose": float(exp.conditions["levels"][lv]["dose"]),
                     "engagement": eng, "x": x})
    changes = trend_values(effects, doses) if len(seeds) else np.zeros(0)
    zeros = np.zeros_like(changes)
    engs = [i["engagement"] for i in info]
    reasons = [below_floor(e) for e in engs]
    measured = all(e.get("status") != "not measured" for e in engs)
    reason = (f"every level below the floor ({reasons[-1]} at the highest dose)"
              if measured and all(reasons) else None)
    result_levels = level_results(claim, effects, levels) if len(seeds) else []
    for entry, extra in zip(result_levels, info, strict=False):
        entry |= extra
    return {"claim": claim, "seeds": seeds, "a": changes, "b": zeros,
            "p": claim_p(trend_claim(claim), changes, zeros), "confounded": claim_audits(
                claim, pairs, exp, flats, means), "engagement": highest(engs, levels),
            "fixed": [], "not_engaged": reason, "engine": None,
            "levels": result_levels or info, "slope_per_dose": float(
                np.mean(slopes(effects, doses))) if len(seeds) else math.nan,
            "dose_range": [float(doses.min()), float(doses.max())]}


def highest(engs: list[dict], levels: list[str]) -> dict:
    """A trend's engagement in one line: the level where the pair's same-batch distance is
    highest (`at`), each level's own beside its effect; "not measured" where no level is."""
    measured = [(e["value"], i) for i, e in enumerate(engs)
                if e.get("status") != "not measured" and not math.isnan(e.get("value", math.nan))]
    if not measured:
        return engs[0] if engs else not_measured("no level")
    return engs[max(measured)[1]] | {"at": levels[max(measured)[1]]}


def fixed_source(claim: dict) -> str:
    return "; ".join(e.get("source", "") for e in claim.get("engaged", []))


def audit_inputs(data: dict) -> tuple[dict, dict, float]:
    """(each arm's flat config, each arm's effective quantities' means, the floor)."""
    exp = data["experiment"]
    table = effective_table(data)
    means = {arm: {k: v["mean"] for k, v in q.items()} for arm, q in table.items()}
    floor = exp.engaged_floor if exp.engaged_floor is not None else DEFAULT_FLOOR
    return arm_configs(data), means, floor


def judge_claims(data: dict) -> list[dict]:
    """Every claim of the (expanded) experiment judged on its finished runs: audits and
    engagement first, then the label from Holm's step-down within its family (headline,
    secondary or descriptive claims; `lmpo.experiments.stats.multiplicity`)."""
    exp = data["experiment"]
    flats, means, floor = audit_inputs(data)
    prepared = [prepare(claim, data, flats, means, floor)
                for claim in claims_under_rule(data, flats)]
    families = family_levels([(family_role(p["claim"], exp), p["p"]) for p in prepared],
                             [hypothesis(p["claim"]) for p in prepared])
    families = [(ALPHA, None, {"family": "premise", "family_size": 1})
                if p["claim"].get("role") == "premise" else f  # each on its own interval
                for p, f in zip(prepared, families, strict=True)]
    looks, plooks = sequential_looks(exp, prepared), premise_looks(exp, prepared)
    per_look = {e.pop("at"): e for e in look_effects(exp, prepared)}
    results = []
    for i, (p, level) in enumerate(zip(prepared, families, strict=True)):
        result = judge_one(p, level, looks.get(i), plooks.get(i), per_look.get(i))
        results.append(named_result(p, result))
    gate(results)
    qualify_splits(results)
    return results


def family_role(claim: dict, exp) -> str:
    """The Holm family a claim's p joins: its role, or, for a claim a re-analysis demoted
    whose sequential looks still decide it, a family of its own (its looks adjust it)."""
    if claim.get("role_at_run") == "headline" and exp.design:
        return "headline (sequential)"
    return claim.get("role", "headline")


def judge_one(p: dict, level: tuple, look: dict | None, plook: dict | None,
              per_look: dict | None) -> dict:
    """One prepared claim's label and numbers: at its sequential look where one decides it
    (a premise at the first look it is decided), else at its family's Holm level."""
    alpha, p_adj, family = level
    claim = p["claim"]
    over_levels = claim_kind(claim["kind"]).over_levels
    judged = trend_claim(claim) if over_levels else claim
    a, b, extra = p["a"], p["b"], {}
    if look is not None:  # the headline family of a sequential design: its looks decide
        n = look["n"]
        a, b = np.asarray(a)[:n], np.asarray(b)[:n]
        alpha = look["level"]
        p_adj = min(1.0, claim_p(judged, a, b) * ALPHA / alpha) if n >= 3 else None
        extra = {"family": "headline (sequential)", "look": look["look"] + 1,
                 "sequential": look["status"], "family_size": look["size"]}
        if look.get("held"):
            extra["held"] = look["held"]
    elif plook is not None:  # a premise: judged once, at the first look it is decided
        n, alpha = plook["n"], plook["alpha"]
        a, b = np.asarray(a)[:n], None if b is None else np.asarray(b)[:n]
        extra = {"look": plook["look"] + 1}
    audited = claim.get("role") != "premise"  # a premise reads the setting, not a method
    result = judge(judged, a, b, confounded=p["confounded"] if audited else None,
                   not_engaged=p["not_engaged"] if audited else None, alpha=alpha,
                   p_adj=p_adj, inert=p.get("inert") if audited else None) | family | extra
    optional = {"twin": p.get("twin"), "per_look": per_look,
                "effect_bound": describe_bound(claim["effect_bound"], a, b)
                if claim.get("effect_bound") else None,
                "unmeasured": p.get("unmeasured") if audited else None,
                "unreached": p.get("unreached")}
    result |= {k: v for k, v in optional.items() if v}
    if over_levels:
        result |= {"levels": p["levels"], "slope_per_dose": p["slope_per_dose"],
                   "dose_range": p["dose_range"], "x": claim.get("x")}
    if p["engine"]:
        result["verdict"] = f"not logged by {p['engine']}: {claim['metric']}"
    return result


def named_result(p: dict, result: dict) -> dict:
    """The claim's report entry: what it compares, then its result; a premise's status."""
    claim = p["claim"]
    named = claim | {"arms": claim.get("base_arms", claim["arms"])}
    out = {"claim": describe_claim(named), "sentence": claim["sentence"],
           "kind": claim["kind"], "seeds": p["seeds"], "engaged": p["fixed"],
           "engagement": p["engagement"], "role": claim.get("role", "headline"),
           "level": claim.get("level"), "index": claim.get("index"),
           "metric": claim["metric"], "reduce": claim.get("reduce", "final"),
           "statistic": claim.get("statistic"), "margin": claim.get("margin"),
           **({"split": claim["split"]} if "split" in claim else {}),
           **({"reanalysis": True} if claim.get("reanalysis") else {}),
           "arms": claim.get("base_arms", claim["arms"])} | result
    if claim.get("role") == "premise":
        state, why = premise_status(out, claim)
        out |= {"premise_status": state, "first": out["verdict"], "verdict": state,
                "reason": why or out.get("reason"), "source": claim["source"],
                "gates": claim["gates"], "premise_index": claim["premise_index"]}
    return out


def design_decision(data: dict) -> dict:
    """What the sequential design says of the runs so far: {looks, claims, stopped,
    next (the seed count of the next look, or None)}."""
    exp = data["experiment"]
    flats, means, floor = audit_inputs(data)
    claims = [c for c in claims_under_rule(data, flats)
              if c.get("role_at_run", c.get("role", "headline")) in ("headline", "premise")]
    record = sequential_record(exp, [prepare(c, data, flats, means, floor) for c in claims])
    record.pop("by_claim", None)
    return record


QUALIFIED = ("holds", "contradicted", "negligible", "underpowered")


def qualify_splits(results: list[dict]) -> None:
    """A claim split into its mechanism's part and its shared part (`twin:`) whose own label
    stands is qualified "via the shared part" where the mechanism's part is negligible (or
    inert) and the shared part holds: the effect is not the method's own mechanism's."""
    for c in results:
        if c.get("split") or c.get("role") == "premise" or c["verdict"] not in QUALIFIED:
            continue
        parts = {r["split"]: r["verdict"] for r in results
                 if r.get("split") and r["index"] == c["index"] and r["level"] == c["level"]}
        if parts.get("mechanism") in ("negligible", "mechanism inert") and \
                parts.get("shared") == "holds":
            c["via"] = "the shared part"


def hypothesis(claim: dict) -> tuple:
    """What a claim tests, whatever row carries it: its level and its described comparison
    (metric, reduction, arms, direction or bound). A split part that repeats another row
    (DRPO - IS-PG as DRPO > GRPO's mechanism part and as a claim of its own) is one
    hypothesis."""
    from lmpo.experiments.design.claims import describe_claim

    return claim.get("level"), describe_claim(claim)
