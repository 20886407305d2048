"""Which comparator each arm's runs log: the other arm of each two-arm claim.

For every claim's pair of arms (x, y) at one level, x's runs evaluate y's parts on their
own batches (`log.comparators`, lmpo.trainer.comparators): the parts of y's resolved config
that differ from x's, among the loss (name, hyper-parameters, aggregation), the advantage
estimator and the rollout controller. A claim may name `comparator: ARM` to use another
arm's parts than its second arm's (a one-arm or four-arm claim has no pair of its own).
The first-listed arm carries the pair's value; the comparator is named after the other
arm (`shadow/<arm>/weight_tv`). The setting lives under `log`, so it never confounds.

A pair whose arms also differ in a key no comparator can replay on the same batch (the
sampler, the group size, a KL coefficient, a rollout precision) has its engagement
"not measured": the shadow would see only part of what the treatment changes.
"""

from __future__ import annotations

from dataclasses import replace

from lmpo.config import build, to_dict
from lmpo.errors import ConfigError
from lmpo.experiments.design.conditions import split_arm
from lmpo.experiments.design.keys import NEVER_COUNT, covered
from lmpo.experiments.stats.kinds import claim_kind

PART_SECTIONS = ("loss", "advantage", "controller")
OWN_RUN = "@run"  # a comparator controller's reference to the run it rides on
TWIN_PREFIX = "twin_"  # a method's ablated twin, as its comparator is named
PART_KEYS = ("loss.name", "loss.hparams", "loss.agg", "advantage", "controller")


def resolved_parts(cfg) -> dict[str, dict]:
    """{section: {name, hparams (with the registry's defaults), agg (for the loss)}} of a
    TrainConfig."""
    from lmpo.losses import default_aggregation
    from lmpo.trainer.resume import effective

    data = effective(to_dict(cfg))
    out = {}
    for section in PART_SECTIONS:
        part = data[section]
        out[section] = {"name": part["name"], "hparams": dict(part.get("hparams") or {})}
    out["loss"]["agg"] = cfg.loss.agg or default_aggregation(cfg.loss.name)
    return out


def comparator_spec(mine, theirs) -> dict[str, dict]:
    """The parts of TrainConfig `theirs` that differ from `mine`'s (empty: none)."""
    a, b = resolved_parts(mine), resolved_parts(theirs)
    return {s: b[s] for s in PART_SECTIONS if a[s] != b[s]}


def claim_pairs(exp) -> dict[str, dict[str, str]]:
    """{run arm: {comparator name: the run arm whose parts it evaluates}} over the claims
    of an expanded experiment."""
    out: dict[str, dict[str, str]] = {}

    def add(x: str, y: str) -> None:
        out.setdefault(x, {})[split_arm(y)[0]] = y

    for claim in exp.claims:
        if claim_kind(claim["kind"]).over_levels:
            for pair in claim["by_level"].values():
                add(pair[0], pair[1])
            continue
        arms = claim["arms"]
        if "comparator" in claim:
            add(arms[0], claim["comparator"])
        elif len(arms) == 2:
            add(arms[0], arms[1])
        elif len(arms) == 4:
            add(arms[0], arms[1])
            add(arms[2], arms[3])
    return out


def comparator_log(exp, arm, data_of) -> dict:
    """{log: {comparators: {...}}} for `arm`'s runs, or {} (no claim pairs it, and no twin
    where the experiment asks for its methods' twins); `data_of(arm)` is an arm's raw
    config mapping without comparators."""
    from lmpo.trainer.train_config import TrainConfig

    pairs = claim_pairs(exp).get(arm.name, {})
    if not pairs and not exp.twins:
        return {}
    try:
        mine = build(TrainConfig, data_of(arm))
    except ConfigError:
        return {}  # the arm itself fails to build: its own error says why
    comps = twin_log(mine) if exp.twins else {}
    for name, other in pairs.items():
        try:
            theirs = build(TrainConfig, data_of(exp.arm(other)))
        except ConfigError:
            continue
        spec = own_curve(comparator_spec(mine, theirs), arm.name)
        if spec and replayable(mine, spec):
            comps[name] = spec
    return {"log": {"comparators": comps}} if comps else {}


def own_curve(spec: dict, arm: str) -> dict:
    """A comparator controller that reads an arm's run (`reference: "@espo"`), replayed on
    that arm's own runs, reads the run it rides on (`"@run"`: its token curve so far);
    on another arm's runs it cannot be replayed (no comparator)."""
    ctl = spec.get("controller")
    refs = {k: v for k, v in ((ctl or {}).get("hparams") or {}).items()
            if isinstance(v, str) and v.startswith("@")}
    if not refs:
        return spec
    if any(split_arm(arm)[0] != v[1:] and arm != v[1:] for v in refs.values()):
        return {}
    hparams = ctl["hparams"] | {k: OWN_RUN for k in refs}
    return spec | {"controller": ctl | {"hparams": hparams}}


def twin_log(mine) -> dict[str, dict]:
    """{`twin_<method>`: its ablated twin} for each method of the TrainConfig `mine` whose
    registration names a twin (lmpo.trainer.comparators.twins) and which its runs can
    replay."""
    from lmpo.trainer.comparators import twins

    return {f"{TWIN_PREFIX}{method}": spec for method, spec in twins(mine).items()
            if replayable(mine, spec)}


def replayable(mine, spec: dict) -> bool:
    """Whether a run of config `mine` can evaluate the parts `spec` on its own batches: a
    critic's estimator or a controller that reads values needs the run's critic (a group
    arm paired with a GAE arm has none; their claim's engagement is not measured)."""
    from lmpo.trainer.comparators import build_comparators

    probe = replace(mine, log=replace(mine.log, comparators={"probe": spec}))
    try:
        build_comparators(probe)
    except ConfigError:
        return False
    return True


def engagement_metric(spec: dict) -> str:
    """The shadow metric that measures a comparator: the gradient-weight distance where it
    replaces the loss or the estimator, the stop-decision difference for a controller."""
    return "weight_tv" if {"loss", "advantage"} & set(spec) else "stop_diff"


def unreplayable(flat_x: dict, flat_y: dict) -> list[str]:
    """The resolved keys two arms' configs differ in that a comparator cannot replay on the
    same batch (outside the parts, the never-counted keys and what is shared by design)."""
    keys = set(flat_x) | set(flat_y)
    return sorted(k for k in keys
                  if k.split(".")[0] not in NEVER_COUNT and not covered(k, list(PART_KEYS))
                  and repr(flat_x.get(k, "<unset>")) != repr(flat_y.get(k, "<unset>")))
