"""`--resume` continues the same run: a changed config is refused, with the diff.

Exempt: `steps` (extending a run is a documented use), `threads` and `log.*`
(neither changes what is computed). Configs are compared as they run (`effective`): a
config saved by an earlier lmpo is upgraded (`lmpo.legacy`), and each part's
hyper-parameters are completed with the registry's defaults, so a run resumes whether a
default was written out or not; `device: auto` is compared as the device it stands for
here, so a run saved under `cpu` resumes under `auto` on a machine without CUDA.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lmpo.advantages import advantage_hparams
from lmpo.config import ConfigError, build, flatten, to_dict
from lmpo.devices import resolved_name
from lmpo.legacy import upgrade_saved
from lmpo.losses import loss_hparams
from lmpo.rollout import controller_hparams
from lmpo.trainer.train_config import TrainConfig
from lmpo.yamlfile import read_yaml_file

EXEMPT = ("steps", "threads", "log")


def part_hparams() -> dict:
    """{config section: hyper-parameter defaults of the part it names}."""

    return {"loss": loss_hparams, "advantage": advantage_hparams,
            "controller": controller_hparams}


def effective(data: dict) -> dict:
    """A config mapping as it runs: upgraded, every part's hyper-parameters complete."""
    data = upgrade_saved(dict(data))
    for section, defaults in part_hparams().items():
        part = dict(data.get(section) or {})
        try:
            full = defaults(part.get("name"))
        except KeyError:  # an unknown name: validation reports it
            continue
        part["hparams"] = full | dict(part.get("hparams") or {})
        data[section] = part
    if isinstance(data.get("device"), str):
        data["device"] = resolved_name(data["device"])
    return data


def config_diff(old: dict, new: dict) -> list[str]:
    """`key: old -> new` for every flattened key that differs (exempt keys skipped)."""
    a, b = flatten(old), flatten(new)
    lines = []
    for key in sorted(set(a) | set(b)):
        if key.split(".")[0] in EXEMPT:
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            lines.append(f"  {key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return lines


def changes_since(old: dict, cfg) -> list[str]:
    """`config_diff` of a saved config mapping and `cfg`, except keys a newer lmpo added
    that `cfg` leaves at their default (the saved run ran with that default's behaviour)."""
    known = flatten(effective(old))
    default = flatten(effective(to_dict(type(cfg)())))
    new = {k: v for k, v in flatten(effective(to_dict(cfg))).items()
           if k in known or k not in default or default[k] != v}
    return config_diff(known, new)


def check_resumable(saved: Path, cfg) -> None:
    """Raise ConfigError if `cfg` differs from the run's saved config.yaml."""
    if not saved.exists():
        return  # nothing ran yet (killed before the config was written)
    old = yaml.safe_load(saved.read_text()) or {}
    diff = changes_since(old, cfg)
    if diff:
        raise ConfigError(f"--resume with a config that differs from the run's ({saved}); "
                          "only steps, threads and log.* may change: "
                          + "; ".join(line.strip() for line in diff))


def load_run_config(path: Path):
    """The TrainConfig a run directory's config.yaml holds (upgraded if an earlier lmpo
    wrote it)."""

    return build(TrainConfig, upgrade_saved(read_yaml_file(path, what="saved run config")))

