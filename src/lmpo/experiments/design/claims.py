"""A claim in an experiment file: its schema, its description and the values it compares.

    - kind: direction                      # direction | threshold | equivalence | spread
                                           # | dose_response (over the condition levels)
      metric: eval/accuracy_trained
      reduce: final                        # how one run becomes one number (stats.REDUCERS)
      arms: [drpo_bf16, clip_bf16]         # 2 arms (4 for a comparison of gains, 1 for a value)
      expect: greater
      sentence: "the paper's words"
      differs_in: [loss]                   # the keys these arms may differ in (default: the
                                           # experiment's); prefix match, never seed,
                                           # threads, log.*, imports
      mediators: [rollout_tokens]          # effective differences that ARE the method
                                           # (`expects` is an alias); the parts that differ
                                           # add their own (registry metadata `mediates`)
      comparator: grpo                     # whose parts the first arm's runs evaluate on
                                           # their own batches (default: the second arm)
      engaged_floor: 0.01                  # the experiment's floor, for this claim
      engaged: [{arm: a, metric: m, min: 0.05, source: "paper, Table 2"}]
                                           # a fixed level, only with its source
      at: L0                               # with conditions: a level, a list or `all`
      primary: true                        # declared before the runs: Holm over these
      x: rollout/logp_mismatch             # dose_response: a metric shown per level
      min_effect: 0.03                     # smallest effect that matters here (metric units),
                                           # set before the run
      paper_effect: "+2.1 points (AIME24)" # context only, never compared

`lmpo.experiments.stats.seeds` judges it; docs/reproductions.md states the rules.
"""

from __future__ import annotations

from lmpo.errors import ConfigError
from lmpo.experiments.design.derived import check_strength
from lmpo.experiments.stats.kinds import CLAIM_KINDS, claim_kind
from lmpo.experiments.stats.seeds import (
    ALWAYS_CONFOUNDS,
    EFFECTIVE,
    LEGACY_EFFECTIVE,
    REDUCERS,
)
from lmpo.registry import nearest

BASE_KEYS = {"kind", "metric", "arms", "sentence"}
OPTIONAL = {"reduce", "k", "label", "differs_in", "expects", "mediators", "engaged",
            "min_effect", "paper_effect", "comparator", "engaged_floor", "at", "primary",
            "matched", "descriptive", "twin", "anchor", "bound_source", "strength",
            "reanalysis", "exploratory"}


def claim_role(claim: dict, primaries: bool, at_l0: bool = True) -> str:
    """The Holm family of a claim judged at L0 (`at_l0`, or an experiment without
    conditions) or at another level: descriptive where it says so or away from L0;
    secondary where the experiment declares primary claims (`primaries`) and this is not
    one; else headline (the family a sequential design decides)."""
    if claim.get("descriptive") or not at_l0:
        return "descriptive"
    return "secondary" if primaries and not claim.get("primary") else "headline"


def mediators(claim: dict) -> list[str]:
    """The claim's declared mediators (`mediators`, or its alias `expects`; an old name of
    a quantity read as today's)."""
    names = [*claim.get("mediators", []), *claim.get("expects", [])]
    return list(dict.fromkeys(LEGACY_EFFECTIVE.get(n, n) for n in names))


def check_claim(claim: dict, arms: list[str], where: str, conditions: dict | None = None
                ) -> None:
    """ConfigError for a malformed claim (before any run starts)."""
    if not isinstance(claim, dict):
        raise ConfigError(f"{where}: a claim is a mapping ({{kind, metric, arms, ...}}), got "
                          f"{claim!r}")
    for key in ("metric", "sentence", "x"):
        if key in claim and not (isinstance(claim[key], str) and claim[key].strip()):
            raise ConfigError(f"{where}: {key} must be a non-empty string, got {claim[key]!r}")
    if "arms" in claim and not (isinstance(claim["arms"], list)
                                and all(isinstance(a, str) for a in claim["arms"])):
        raise ConfigError(f"{where}: arms must be a list of arm names, got {claim['arms']!r}")
    if "k" in claim and (isinstance(claim["k"], bool) or not isinstance(claim["k"], int)
                         or claim["k"] < 1):
        raise ConfigError(f"{where}: k must be an int >= 1, got {claim['k']!r}")
    name = claim.get("kind")
    if not isinstance(name, str) or name not in CLAIM_KINDS.names():
        raise ConfigError(f"{where}: kind must be one of {', '.join(CLAIM_KINDS.names())}, "
                          f"got {name!r}{nearest(str(name), CLAIM_KINDS.names())}")
    kind = claim_kind(name)
    if kind.over_levels:
        check_dose_response(claim, arms, where, conditions or {})
        check_audit_fields(claim, arms, where)
        return
    for key in sorted(set(claim) - kind.allows - kind.needs):
        owners = [k for k in CLAIM_KINDS.names() if key in claim_kind(k).allows]
        if owners and not any(key in claim_kind(k).needs for k in CLAIM_KINDS.names()):
            raise ConfigError(f"{where}: {key} is a {owners[0]} claim's key")
    need = BASE_KEYS | kind.needs
    missing = sorted(need - set(claim))
    if missing:
        raise ConfigError(f"{where}: a {name} claim needs {missing}")
    allowed = need | OPTIONAL | kind.allows
    extra = sorted(set(claim) - allowed)
    if extra:
        raise ConfigError(f"{where}: unknown claim key(s) {extra}; valid: {sorted(allowed)}")
    if kind.statistics and claim.get("statistic", "difference") not in kind.statistics:
        raise ConfigError(f"{where}: statistic must be one of {kind.statistics} for a {name} "
                          "claim")
    check_arms(claim, arms, where)
    check_matched(claim, where)
    kind.check_own(claim, where)
    if claim.get("reduce", "final") not in REDUCERS:
        raise ConfigError(f"{where}: reduce must be one of {REDUCERS}")
    check_audit_fields(claim, arms, where)
    from lmpo.experiments.design.conditions import claim_levels

    claim_levels(claim, conditions or {}, where)


def check_matched(claim: dict, where: str) -> None:
    """`matched: {x: kl/ref, level: 0.3, window: 10}`: the metric is read, per run, where
    its drift `x` (the training mean over `window` steps) first reaches `level`
    (lmpo.experiments.design.frontier.read_at), not reduced over the run."""
    if "matched" not in claim:
        return
    m = claim["matched"]
    if not claim_kind(claim["kind"]).matched:
        takes = [k for k in CLAIM_KINDS.names() if claim_kind(k).matched
                 and not claim_kind(k).over_levels]
        raise ConfigError(f"{where}: matched reads a {', '.join(takes[:-1])} or {takes[-1]} "
                          "claim at a drift level")
    if not isinstance(m, dict) or set(m) - {"x", "level", "window"} or \
            not isinstance(m.get("x"), str) or isinstance(m.get("level"), bool) or \
            not isinstance(m.get("level"), int | float) or not m["level"] > 0 or \
            not isinstance(m.get("window", 10), int) or m.get("window", 10) < 1:
        raise ConfigError(f"{where}: matched is {{x: METRIC, level: > 0, window: int >= 1}}, "
                          f"got {m!r}")
    if "reduce" in claim:
        raise ConfigError(f"{where}: a matched claim reads its metric at the drift level; "
                          "it takes no reduce")


def check_dose_response(claim: dict, arms: list[str], where: str, conditions: dict) -> None:
    """A claim over the condition levels (a trend): its keys, >= 2 levels, two arms."""
    kind = claim_kind(claim["kind"])
    name = kind.name
    need = BASE_KEYS | kind.needs
    missing = sorted(need - set(claim))
    if missing:
        raise ConfigError(f"{where}: a {name} claim needs {missing}")
    valid = need | OPTIONAL | kind.allows
    extra = sorted((set(claim) - valid) | ({"at"} & set(claim)))
    if extra:
        raise ConfigError(f"{where}: unknown {name} key(s) {extra}; valid: "
                          f"{sorted(valid - {'at'})}")
    if len((conditions or {}).get("levels") or {}) < 2:
        raise ConfigError(f"{where}: a {name} claim needs conditions with >= 2 levels")
    pair = claim["arms"]
    if not (isinstance(pair, list) and len(pair) == 2 and all(a in arms for a in pair)
            and pair[0] != pair[1]):
        raise ConfigError(f"{where}: arms must name two different arms of {arms}, got {pair!r}")
    kind.check_own(claim, where)
    if claim.get("reduce", "final") not in REDUCERS:
        raise ConfigError(f"{where}: reduce must be one of {REDUCERS}")


def check_arms(claim: dict, arms: list[str], where: str) -> None:
    pair, counts = claim["arms"], claim_kind(claim["kind"]).arm_counts(claim)
    one = counts == (1,)
    if 4 in counts and isinstance(pair, list) and len(pair) == 4:
        if not (all(a in arms for a in pair) and pair[0] != pair[1] and pair[2] != pair[3]):
            raise ConfigError(f"{where}: a comparison of gains names four arms of {arms} "
                              f"(a - b vs c - d), got {pair!r}")
    elif one and not (isinstance(pair, list) and len(pair) == 1 and pair[0] in arms):
        raise ConfigError(f"{where}: a claim on a value names one arm of {arms}, got {pair!r}")
    elif not one and not (isinstance(pair, list) and len(pair) == 2 and
                          all(a in arms for a in pair) and pair[0] != pair[1]):
        raise ConfigError(f"{where}: arms must name two different arms of {arms}, got {pair!r}")


def check_split_arms(claim: dict, arms: list[str], where: str) -> None:
    """`twin` and `anchor` each name a third arm of a two-arm claim; `bound_source` is a
    cited reason."""
    what = {"twin": "the first arm's method with only its mechanism removed",
            "anchor": "the first arm with the second's anchor, rollout.old_logp"}
    for key, meaning in what.items():
        if key in claim and (claim[key] not in arms or len(claim["arms"]) != 2
                             or claim[key] in claim["arms"]
                             or claim_kind(claim["kind"]).over_levels):
            raise ConfigError(f"{where}: {key} names a third arm of {arms} ({meaning}) for a "
                              f"two-arm claim, got {claim[key]!r}")
    if "bound_source" in claim and not (isinstance(claim["bound_source"], str)
                                        and claim["bound_source"].strip()):
        raise ConfigError(f"{where}: bound_source is the cited reason for a bound other than "
                          "the default rule (a non-empty string)")


def check_audit_fields(claim: dict, arms: list[str], where: str) -> None:
    """differs_in, expects, engaged, min_effect and paper_effect, when given."""
    if "differs_in" in claim and not (isinstance(claim["differs_in"], list) and all(
            isinstance(k, str) for k in claim["differs_in"])):
        raise ConfigError(f"{where}: differs_in must be a list of dotted config keys")
    for key in ("mediators", "expects"):
        if key in claim and not (isinstance(claim[key], list)
                                 and all(isinstance(k, str) for k in claim[key])):
            raise ConfigError(f"{where}: {key} must be a list of effective quantities")
    unknown = sorted(set(mediators(claim)) - set(EFFECTIVE))
    if unknown:
        raise ConfigError(f"{where}: mediators name unknown quantities {unknown}; valid: "
                          f"{', '.join(k for k in EFFECTIVE if k not in ALWAYS_CONFOUNDS)}")
    fixed = sorted(set(mediators(claim)) & set(ALWAYS_CONFOUNDS))
    if fixed:
        raise ConfigError(f"{where}: {', '.join(fixed)} cannot be a mediator: arms that take "
                          "unequal optimiser steps are confounded whatever else differs")
    if "comparator" in claim and claim["comparator"] not in arms:
        raise ConfigError(f"{where}: comparator must name an arm of {arms}, got "
                          f"{claim['comparator']!r}")
    check_split_arms(claim, arms, where)
    floor = claim.get("engaged_floor")
    if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float)
                              or not 0 < floor < 1):
        raise ConfigError(f"{where}: engaged_floor must be a number in (0, 1), got {floor!r}")
    for key in ("primary", "descriptive", "exploratory"):
        if key in claim and not isinstance(claim[key], bool):
            raise ConfigError(f"{where}: {key} must be true or false")
    if claim.get("primary") and claim.get("descriptive"):
        raise ConfigError(f"{where}: a claim is primary (the headline family) or descriptive "
                          "(reported beside it, its own family), not both")
    for i, entry in enumerate(claim.get("engaged", [])):
        at = f"{where}: engaged[{i}]"
        if not isinstance(entry, dict) or not {"arm", "metric"} <= set(entry):
            raise ConfigError(f"{at} must be {{arm, metric, min | max, source, reduce}}")
        if entry["arm"] not in arms:
            raise ConfigError(f"{at}: unknown arm {entry['arm']!r}; arms: {', '.join(arms)}")
        if not isinstance(entry.get("source"), str) or not entry["source"].strip():
            raise ConfigError(f"{at}: a fixed engagement level needs its source (a paper's "
                              "number, or the experiment's own L0 condition); without one, "
                              "engagement is the pair's measured same-batch distance")
        bounds = [k for k in ("min", "max") if k in entry]
        if len(bounds) != 1 or set(entry) - {"arm", "metric", "min", "max", "reduce", "k",
                                             "source"}:
            raise ConfigError(f"{at} needs exactly one of min or max (and optionally reduce)")
        if entry.get("reduce", "mean") not in REDUCERS:
            raise ConfigError(f"{at}: reduce must be one of {REDUCERS}")
    check_strength(claim, where)
    if "min_effect" in claim and not (isinstance(claim["min_effect"], int | float)
                                      and claim["min_effect"] > 0):
        raise ConfigError(f"{where}: min_effect must be a number > 0 (the metric's units)")


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


def arm_pairs(claim: dict) -> list[tuple[str, str]]:
    """The pairs of arms a claim's comparison rests on (none for a one-arm value)."""
    arms = claim["arms"]
    if len(arms) == 4:
        return [(arms[0], arms[1]), (arms[2], arms[3])]
    return [(arms[0], arms[1])] if len(arms) == 2 else []


def describe_claim(claim: dict) -> str:
    arms = claim["arms"]
    a, b = (arms * 2)[:2] if len(arms) < 4 else (f"({arms[0]} - {arms[1]})",
                                                  f"({arms[2]} - {arms[3]})")
    k = claim.get("k", 20)
    m = claim["metric"] + {"last_k": f" (last {k})", "first_k": f" (first {k})",
                           "rebound": f" (rebound over {k})",
                           "last_over_first": f" (last {k} / first {k})",
                           "max": " (max over the run)", "max_last_k": f" (max over the last {k})",
                           "mean": " (mean over the run)",
                           "sum": " (summed over the run)"}.get(
        claim.get("reduce", "final"), "")
    if "matched" in claim:
        m += f" at {claim['matched']['x']} = {claim['matched']['level']:g}"
    return claim_kind(claim["kind"]).describe(claim, m, a, b)
