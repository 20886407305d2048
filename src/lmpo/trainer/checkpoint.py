"""Atomic checkpoints and the run directory's metrics log.

A checkpoint is written to a temporary file, fsynced, then renamed into place,
so `checkpoints/` only ever holds complete files: a crash mid-write leaves at
most a stray `.tmp`, which `latest_checkpoint` ignores and the next save
overwrites. Metrics rows are appended and fsynced *before* the step's
checkpoint; on resume, rows after the checkpoint's step (and any torn last
line) are dropped, so the resumed run writes exactly the rows the
uninterrupted run would have.

Checkpoints hold only tensors and plain containers (dict, list, tuple, str,
int, float, bool, None) and load with `torch.load(..., weights_only=True)`:
unpickling arbitrary objects could run code, so a checkpoint holding anything
else is refused.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import torch

from lmpo.faults import crash_point

PLAIN = (str, int, float, bool, type(None), torch.Tensor)
CKPT = re.compile(r"^ckpt-(\d{6,})\.pt$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointError(RuntimeError):
    pass


def check_plain(obj, where: str = "state") -> None:
    """Raise TypeError naming the first value that is not a tensor or plain container."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str | int):
                raise TypeError(f"{where} has a key of type {type(k).__name__}: {k!r}")
            check_plain(v, f"{where}[{k!r}]")
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            check_plain(v, f"{where}[{i}]")
    elif not isinstance(obj, PLAIN):
        raise TypeError(f"{where} is a {type(obj).__name__}: checkpoints hold only tensors and "
                        "plain containers")


def save_checkpoint(run_dir: Path, step: int, state: dict, keep: int = 2) -> Path:
    check_plain(state)
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"ckpt-{step:06d}.pt"
    tmp = folder / f".{final.name}.tmp"
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    crash_point("mid_checkpoint", step)
    os.replace(tmp, final)
    _fsync_dir(folder)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        old.unlink(missing_ok=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if CKPT.match(p.name)]
    return sorted(found, key=lambda p: int(CKPT.match(p.name).group(1)))


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def load_checkpoint(path: Path) -> dict:
    """Load with `weights_only=True`; anything but tensors and plain containers is refused."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError (or RuntimeError) for such files
        raise CheckpointError(
            f"refusing to load {path}: it holds objects other than tensors and plain "
            f"containers, and unpickling them could run code ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None


def append_row(path: Path, row: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def read_rows(path: Path) -> list[dict]:
    """Complete rows of a metrics.jsonl (a torn final line is ignored)."""
    if not Path(path).exists():
        return []
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return rows


def truncate_rows(path: Path, last_step: int) -> None:
    """Keep only rows with step <= last_step (atomically rewritten)."""
    rows = [r for r in read_rows(path) if r.get("step", 0) <= last_step]
    tmp = Path(path).with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)
