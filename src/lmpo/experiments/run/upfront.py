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
    out = []
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
            arm = entry["arm"] if level is None else f"{entry['arm']}@{level}"
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


def check_experiment(flat, seed: int) -> dict:
    """Every up-front check of the expanded experiment `flat`; its arms' configs."""
    configs = arm_configs(flat, seed)
    for name, cfg in configs.items():
        check_tiers(name, cfg)
    check_metrics(flat, configs)
    return configs
