"""`--resume` continues the same run: a changed config is refused, with the diff.

Exempt: `steps` (extending a run is a documented use), `threads` and `log.*`
(neither changes what is computed).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from lmpo.config import ConfigError, flatten, to_dict

EXEMPT = ("steps", "threads", "log")


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


def check_resumable(saved: Path, cfg) -> None:
    """Raise ConfigError if `cfg` differs from the run's saved config.yaml."""
    if not saved.exists():
        return  # nothing ran yet (killed before the config was written)
    old = yaml.safe_load(saved.read_text()) or {}
    diff = config_diff(old, to_dict(cfg))
    if diff:
        raise ConfigError(f"--resume with a config that differs from the run's ({saved}); "
                          "only steps, threads and log.* may change:\n" + "\n".join(diff))
