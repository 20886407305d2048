"""What `lmpo compare` (and `--list`) checks before the first run: every arm's config
builds, every tier an arm trains on exists, and every metric a claim, a frontier or an
engagement level reads is one that the runs it reads will log (the metrics their
configured parts declare: lmpo.trainer.metric_names). A failure is one ConfigError
naming every broken arm or metric, before anything is written.
"""

from __future__ import annotations

import functools

from lmpo.errors import ConfigError
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.registry import nearest


def arm_configs(flat, seed: int) -> dict:
    """{arm: TrainConfig} of every run arm of the expanded experiment `flat`; one
    ConfigError naming every arm that does not build."""
    from lmpo.experiments.design.spec import arm_config

    configs, broken = {}, []
    for arm in flat.arms:
        try:
            configs[arm.name] = arm_config(flat, arm, seed)
        except ConfigError as exc:
            broken.append(str(exc))
    if broken:
        more = f" (and {len(broken) - 3} more arm(s))" if len(broken) > 3 else ""
        raise ConfigError("; ".join(broken[:3]) + more)
    return configs


@functools.lru_cache(maxsize=16)
def _tiers(task: str, params: str) -> tuple[str, ...]:
    import json

    from lmpo.tasks import get_task

    return tuple(get_task(task, json.loads(params) or None).clusters)


def check_tiers(name: str, cfg) -> None:
    """rollout.clusters names tiers of the arm's task."""
    import json

    if not cfg.rollout.clusters:
        return
    tiers = _tiers(cfg.task, json.dumps(cfg.task_params or {}, sort_keys=True))
    unknown = [c for c in cfg.rollout.clusters if c not in tiers]
    if unknown:
        raise ConfigError(f"arm {name!r}: rollout.clusters {unknown} unknown for task "
                          f"{cfg.task}; tiers: {', '.join(tiers)}")


def read_metrics(flat) -> list[tuple[str, str, list[str]]]:
    """(where, metric, the run arms it is read from) for every metric the experiment reads."""
    out, ran = [], {a.name for a in flat.arms}
    for claim in flat.claims:
        where = f"claims[{claim['index']}]"
        arms = claim.get("arms", [])
        if claim_kind(claim["kind"]).over_levels:
            arms = [a for pair in claim["by_level"].values() for a in pair]
        out.append((where, claim["metric"], arms))
        if "x" in claim:
            out.append((f"{where}.x", claim["x"], arms))
        if "matched" in claim:
            out.append((f"{where}.matched.x", claim["matched"]["x"], arms))
        level = claim.get("level")
        for i, entry in enumerate(claim.get("engaged", [])):
            arm = entry["arm"] if level is None or entry["arm"] in ran \
                else f"{entry['arm']}@{level}"
            out.append((f"{where}.engaged[{i}]", entry["metric"], [arm]))
    if flat.frontier:
        every = [a.name for a in flat.arms]
        for key in ("x", "ys", "peak"):
            for metric in ([flat.frontier[key]] if key == "x" else flat.frontier[key]):
                out.append((f"frontier.{key}", metric, every))
    return out


def check_metrics(flat, configs: dict) -> None:
    """Every metric read is declared by every run arm it is read from."""
    from lmpo.trainer.metric_names import declared, logs

    names = {arm: declared(cfg) for arm, cfg in configs.items()}
    problems = []
    for where, metric, arms in read_metrics(flat):
        missing = [a for a in arms if a in names and not logs(names[a], metric)]
        if missing:
            exact = sorted({n for a in missing for n in names[a] if "*" not in n})
            problems.append(f"{where}: metric {metric!r} is not logged by arm(s) "
                            f"{', '.join(dict.fromkeys(missing))}{nearest(metric, exact)}")
    if problems:
        raise ConfigError(f"experiment {flat.name!r}: " + "; ".join(dict.fromkeys(problems))
                          + " (`lmpo train` logs what its loss, estimator, controller and "
                          "comparators declare; see docs/running.md)")


def check_policy_of(name: str, cfg) -> None:
    """The arm's policy names a model folder, a packaged model or a warm-start preset."""
    from lmpo.warmstart import check_policy

    try:
        check_policy(cfg.policy)
    except ConfigError as exc:
        raise ConfigError(f"arm {name}: {exc}") from None


def check_experiment(flat, seed: int) -> dict:
    """Every up-front check of the expanded experiment `flat`; its arms' configs."""
    configs = arm_configs(flat, seed)
    for name, cfg in configs.items():
        check_policy_of(name, cfg)
        check_tiers(name, cfg)
    check_metrics(flat, configs)
    if flat.twins:
        check_decomposition(flat, configs)
    return configs


def twin_config(cfg, baseline):
    """`cfg` with the twins of the methods `baseline` does not run in their place (the
    method without its mechanism: lmpo.trainer.comparators.twins), or None: no such method."""
    from lmpo.config import build, to_dict
    from lmpo.experiments.design.comparators import resolved_parts
    from lmpo.trainer.comparators import twins
    from lmpo.trainer.train_config import TrainConfig

    theirs = {p["name"] for p in resolved_parts(baseline).values()}
    specs = [s for m, s in twins(cfg).items() if m not in theirs]
    if not specs:
        return None
    data = to_dict(cfg)
    for spec in specs:
        for section, sub in spec.items():
            data[section] = data[section] | {"name": sub["name"],
                                             "hparams": dict(sub.get("hparams") or {})}
            if "agg" in sub:
                data[section]["agg"] = sub["agg"]
    return build(TrainConfig, data)


def differences(x, y) -> list[str]:
    """The parts and the other counted keys in which two configs differ (never the log,
    the seed or the threads)."""
    from lmpo.config import flat_config
    from lmpo.experiments.design.comparators import comparator_spec, unreplayable

    return sorted(comparator_spec(x, y)) + unreplayable(flat_config(x), flat_config(y))


def check_decomposition(flat, configs: dict) -> None:
    """In an experiment with `twins: true`, a claim "method > baseline" whose arms differ in
    more than the method's mechanism (its twin is not the baseline) names the method's twin
    as an arm (`twin:`), and that arm is the method with only its mechanism removed: its
    effect then splits into the mechanism's part and the shared part. One line otherwise."""
    for claim in flat.claims:
        if claim.get("role") not in ("headline", "secondary") or len(claim["arms"]) != 2 \
                or claim_kind(claim["kind"]).over_levels:  # a trend: judged per level
            continue
        check_anchor(flat, claim, configs)
        m, b = claim["arms"]
        twin = twin_config(configs[m], configs[b])
        if twin is None or not differences(twin, configs[b]):
            continue  # no method with a twin under test, or the pair is method vs twin
        where = f"experiment {flat.name!r}: claims[{claim['index']}]"
        method, baseline = claim["base_arms"]
        if "twin" not in claim:
            raise ConfigError(
                f"{where}: {method} differs from {baseline} in more than its method's "
                f"mechanism ({', '.join(differences(twin, configs[b]))}); add the method's "
                f"ablated twin as an arm ({method} with only the mechanism removed) and name "
                "it in the claim's `twin:`, so the effect splits into the mechanism's part "
                "and the shared part")
        t = split_arm_of(flat, claim, "shared", "twin", where)
        wrong = differences(twin, configs[t])
        if wrong:
            raise ConfigError(f"{where}: twin {claim['twin']!r} is not {method} with only its "
                              f"mechanism removed: it differs from that in {', '.join(wrong)}")


ANCHOR = "old_logp"  # rollout.old_logp: which log-probs anchor the ratio


def split_arm_of(flat, claim: dict, part: str, key: str, where: str) -> str:
    """The first arm of the claim's `part` split row at its level (the twin's or the
    anchor-matched arm, named by the claim's `key`); a ConfigError where that arm does not
    run at the claim's level."""
    arm = next((c["arms"][0] for c in flat.claims if c.get("split") == part
                and c["index"] == claim["index"] and c.get("level") == claim.get("level")),
               None)
    if arm is None:
        raise ConfigError(f"{where}: {key} {claim[key]!r} does not run at "
                          f"{claim.get('level')}, where the claim is judged (its `levels`)")
    return arm


def check_anchor(flat, claim: dict, configs: dict) -> None:
    """A claim whose arms differ in their anchor (`rollout.old_logp`) names an anchor-
    matched arm (`anchor:`): its first arm with the second's anchor and nothing else
    changed, so the effect splits into the anchor's part and the matched part."""
    m, b = claim["arms"]
    mine, theirs = configs[m].rollout.old_logp, configs[b].rollout.old_logp
    if mine == theirs:
        return
    where = f"experiment {flat.name!r}: claims[{claim['index']}]"
    method, baseline = claim["base_arms"]
    if "anchor" not in claim:
        raise ConfigError(
            f"{where}: {method} and {baseline} differ in their anchor (rollout.old_logp "
            f"{mine} vs {theirs}); add {method} with rollout.old_logp: {theirs} as an arm "
            "and name it in the claim's `anchor:`, so the effect splits into the anchor's "
            "part and the matched part")
    r = split_arm_of(flat, claim, "matched", "anchor", where)
    wrong = [k for k in differences(configs[m], configs[r]) if k != f"rollout.{ANCHOR}"]
    if configs[r].rollout.old_logp != theirs or wrong:
        what = ", ".join(wrong) or f"rollout.old_logp {configs[r].rollout.old_logp}"
        raise ConfigError(f"{where}: anchor {claim['anchor']!r} is not {method} with "
                          f"{baseline}'s anchor ({theirs}): it differs in {what}")
