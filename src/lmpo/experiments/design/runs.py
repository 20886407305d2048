"""Each run's config, built from an experiment (`lmpo.experiments.design.spec`): the
arm's preset, the experiment's base, the arm's overrides (with a condition level's), the
steps and the seed, and the comparators its claims ask for; and `check_differs`, which
fails before any run on a resolved key the arms differ in outside `differs_in`. (`exp` is
an `Experiment`, `arm` one of its `Arm`s: this module imports nothing from spec, which
re-exports it.)"""

from __future__ import annotations

from lmpo.config import build, flat_config, flatten, merge, own_keys, read_layers, read_yaml
from lmpo.errors import ConfigError
from lmpo.experiments.design.conditions import level_keys
from lmpo.experiments.design.keys import COMPARATOR_KEY, PER_RUN_KEYS, covered
from lmpo.trainer.train_config import TrainConfig


def arm_data(exp, arm, seed: int, *, threads: int | None = None,
             comparators: bool = True) -> dict:
    """The raw config mapping of one run: preset <- base <- arm overrides (with a condition
    level's) <- steps, seed; and, under `log.comparators`, the parts of the arms it is
    compared with in the claims (lmpo.experiments.design.comparators)."""
    if exp.conditions and not exp.flat:
        raise ConfigError(f"experiment {exp.name!r} has conditions: its runs are the arms of "
                          "exp.expand() (`arm@level`)")
    data = merge(merge(read_yaml(arm.preset, "train"), exp.base), arm.overrides)
    data = merge(data, {"steps": exp.steps, "seed": seed + arm.seed_offset})
    if exp.warm_starts == "per_seed" and "policy_seed" not in data:
        from lmpo.warmstart import is_preset

        if is_preset(str(data.get("policy", "nano-chain-sum"))):  # each seed its own draw
            data["policy_seed"] = seed + arm.seed_offset
    if threads is not None:
        data["threads"] = threads
    if comparators:
        from lmpo.experiments.design.comparators import comparator_log

        data = merge(data, comparator_log(
            exp, arm, lambda other: arm_data(exp, other, seed, comparators=False)))
    return data


def dropped_base_hparams(exp, data: dict) -> list[str]:
    """The base's shared hyper-parameters an arm would silently lose: a base section that
    names no function (`loss: {hparams: {clip_ratio_c: 10}}`) is meant for every arm, but
    an arm that names another function than its preset's keeps none of the hparams it
    inherits (lmpo.config.merge). A base that names the function keeps that rule."""
    lost = []
    for section, shared in exp.base.items():
        if not isinstance(shared, dict) or "name" in shared or not shared.get("hparams"):
            continue
        kept = (data.get(section) or {}).get("hparams") or {}
        lost += [f"{section}.hparams.{k}" for k in shared["hparams"] if k not in kept]
    return lost


def arm_config(exp, arm, seed: int, *, threads: int | None = None
               ) -> TrainConfig:
    where = f"experiment {exp.name!r}, arm {arm.name!r}"
    try:
        data = arm_data(exp, arm, seed, threads=threads)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    lost = dropped_base_hparams(exp, data)
    if lost:
        raise ConfigError(f"{where}: the base's {', '.join(lost)} would not apply: the arm "
                          "names another function than its preset's, which keeps none of "
                          "the hparams it inherits; restate them in the arm's overrides")
    try:
        TrainConfig.check_own_keys(data, own_keys(read_layers(arm.preset, "train")) | set(
            flatten(merge(exp.base, arm.overrides))))
        return build(TrainConfig, data)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def arm_differences(exp, seed: int = 0) -> dict[str, dict[str, object]]:
    """{key: {arm: value}} for every resolved key that is not the same in every arm (the
    comparators each arm logs aside: they follow from the claims)."""
    exp = exp.expand()
    flats = {a.name: flat_config(arm_config(exp, a, seed)) for a in exp.arms}
    keys = sorted({k for f in flats.values() for k in f
                   if not k.startswith(COMPARATOR_KEY)} - set(PER_RUN_KEYS))
    return {k: {a: f.get(k, "<unset>") for a, f in flats.items()} for k in keys
            if len({repr(f.get(k, "<unset>")) for f in flats.values()}) > 1}


def check_differs(exp) -> dict[str, dict[str, object]]:
    """The arms' differences; ConfigError naming any key outside `differs_in` (and the
    keys the condition levels set)."""
    diff = arm_differences(exp)
    allowed = exp.differs_in + level_keys(exp.conditions)
    bad = {k: v for k, v in diff.items() if not covered(k, allowed)}
    if bad:
        lines = "; ".join(f"{k}: " + ", ".join(f"{a}={v!r}" for a, v in vals.items())
                          for k, vals in bad.items())
        raise ConfigError(f"experiment {exp.name!r}: the arms differ in keys outside "
                          f"differs_in {exp.differs_in}: {lines}")
    return diff
