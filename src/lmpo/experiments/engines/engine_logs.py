"""Runs that another engine trained, read as lmpo's metrics rows so `lmpo report` judges them.

verl: `lmpo compare --engine verl` points each launch's file logger
(`trainer.logger=[console,file]`, VERL_FILE_LOGGER_PATH) at the run directory's
`verl.jsonl`, one JSON line per step, `{"step": n, "data": {metric: value}}` (verl's
`FileLogger`), with a validation before training (step 0) and at the last step. Its
metric names become lmpo's (`VERL_NAMES`; the plugin's `actor/lmpo/<m>` -> `loss/<m>`);
validation means over the held-out file (`val-core/<data_source>/reward/mean@N`,
`val-aux/<data_source>/acc/mean@N` from the exported reward's `acc`) become
`eval/reward_mean` and `eval/accuracy_mean`. verl logs no per-tier held-out accuracy, so
a claim on `eval/accuracy_trained` (or any metric verl did not log) reads "not logged by
verl".

TRL: `--engine trl` writes lmpo's own layout; a TRL run with only TRL's
`trainer_state.json` (its `log_history`, one entry per logging step) is read with the same
name mapping as `lmpo.integrations.trl_run`, one row per rollout batch (the optimiser
steps per batch, minibatches x epochs, come from the run's config); TRL logs no lmpo
held-out evaluation, so claims on `eval/*` read "not logged by trl".
"""

from __future__ import annotations

import json
import re
from pathlib import Path

VERL_NAMES = {"critic/score/mean": "reward/mean", "actor/entropy": "policy/entropy",
              "actor/pg_clipfrac": "loss/clipfrac", "actor/pg_clipfrac_lower": "loss/clipfrac_low",
              "actor/ppo_kl": "loss/approx_kl", "actor/kl_loss": "kl/ref",
              "actor/grad_norm": "grad/norm", "response_length/mean": "rollout/length_mean",
              "critic/vf_loss": "value/loss"}
VAL = re.compile(r"^val-(?:core|aux)/[^/]+(?:/[^/]+)*/(reward|acc)/mean@\d+$")
VAL_NAMES = {"reward": "eval/reward_mean", "acc": "eval/accuracy_mean"}


def lmpo_name(key: str) -> str | None:
    if key in VERL_NAMES:
        return VERL_NAMES[key]
    if key.startswith("actor/lmpo/"):
        return "loss/" + key.removeprefix("actor/lmpo/")
    match = VAL.match(key)
    return VAL_NAMES[match.group(1)] if match else None


def verl_rows(path: str | Path) -> tuple[list[dict], dict]:
    """(rows for steps >= 1, the row of the validation before training) from verl.jsonl;
    a line that is not verl's {"step", "data"} raises ValueError naming file:line."""
    rows: dict[int, dict] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            step, data = int(entry["step"]), dict(entry["data"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{lineno}: not a verl file-logger line ({exc})") from None
        row = rows.setdefault(step, {"step": step})
        for key, value in data.items():
            name = lmpo_name(key)
            if name and isinstance(value, int | float):
                row[name] = float(value)
    before = rows.pop(0, {"step": 0})
    return [rows[s] for s in sorted(rows)], before


def trl_rows(path: str | Path, updates_per_step: int) -> tuple[list[dict], dict]:
    """(rows, before) from TRL's trainer_state.json: each log_history entry with a reward
    becomes the row of rollout batch ceil(step / updates_per_step)."""
    from lmpo.experiments.engines.trl_mapping import lmpo_row

    state = json.loads(Path(path).read_text())
    rows = [lmpo_row(entry, -(-int(entry["step"]) // updates_per_step))
            for entry in state.get("log_history", []) if "reward" in entry]
    return rows, {"step": 0}


TRL_STATE = Path("trl") / "trainer_state.json"  # where `--engine trl` keeps TRL's state


def engine_rows(run_dir: Path, cfg_path: Path) -> tuple[list[dict], dict, str] | None:
    """(rows, before, engine) of a run another engine trained in `run_dir`, or None."""
    from lmpo.experiments.engines.verl_launch import VERL_LOG

    if (run_dir / VERL_LOG).exists():
        return (*verl_rows(run_dir / VERL_LOG), "verl")
    if (run_dir / TRL_STATE).exists() and cfg_path.exists():
        import yaml

        optim = (yaml.safe_load(cfg_path.read_text()) or {}).get("optim", {})
        updates = int(optim.get("minibatches", 1)) * int(optim.get("epochs", 1))
        return (*trl_rows(run_dir / TRL_STATE, updates), "trl")
    return None
