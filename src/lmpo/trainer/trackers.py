"""Experiment trackers next to TensorBoard: Weights & Biases, offline by default.

    log: {wandb: {project: lmpo, mode: offline}}   # online | offline | disabled

The run's config goes with it; each metrics row is logged at its step; the tracker's files
go under the run directory (`wandb/`) unless `dir` says otherwise. A resumed run continues
the same tracker run (its id is kept in `wandb_id`). `wandb` is an optional dependency
(`pip install wandb`; the dev extra installs it for the tests); online mode needs the
user's own login and network, which lmpo never assumes.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from lmpo.errors import ConfigError

MODES = ("offline", "online", "disabled")
KEYS = {"project", "mode", "dir", "name", "entity", "tags"}


def check_wandb(spec: dict | None) -> None:
    if not spec:
        return
    if not isinstance(spec, dict) or set(spec) - KEYS:
        raise ConfigError(f"log.wandb is a mapping with keys {sorted(KEYS)}, got {spec!r}")
    if spec.get("mode", "offline") not in MODES:
        raise ConfigError(f"log.wandb.mode must be one of {', '.join(MODES)}, "
                          f"got {spec.get('mode')!r}")


class WandbTracker:
    def __init__(self, spec: dict, run_dir: Path, config: dict):
        check_wandb(spec)
        try:
            import wandb
        except ImportError:
            raise ConfigError("log.wandb needs the wandb package: pip install wandb") from None
        id_file = run_dir / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(project=spec.get("project", "lmpo"), entity=spec.get("entity"),
                              name=spec.get("name", run_dir.name), tags=spec.get("tags"),
                              mode=spec.get("mode", "offline"),
                              dir=str(spec.get("dir", run_dir)), id=run_id, resume="allow",
                              config=config, reinit="create_new")

    def log(self, row: dict, step: int) -> None:
        self.run.log({k: v for k, v in row.items() if k != "step"}, step=step)

    def close(self) -> None:
        self.run.finish()
