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
verl". TRL runs (`--engine trl`) are written in lmpo's own layout and need no reading.
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
