"""Atomic, verified checkpoints and the run directory's metrics log.

A checkpoint is written to a temporary file, fsynced, its size and SHA-256 recorded
beside it (`ckpt-NNNNNN.pt.json`), then renamed into place, so `checkpoints/` only ever
holds complete files: a crash mid-write leaves at most a stray `.tmp`, which the next save
overwrites. A write that fails (no space, no permission, a read-only directory, a file
size limit) removes what it wrote and raises `CheckpointWriteError`, one line naming the
file, the cause and the step the run can resume from.

Loading verifies first: the recorded size and checksum (or, for a checkpoint written
before they were recorded, the zip archive's own CRCs). On resume a damaged newest
checkpoint is reported in one line and the newest intact one is used; when none is intact
the error names the files. Metrics rows are appended and fsynced *before* the step's
checkpoint; on resume, rows after the checkpoint's step (and any torn last line) are
dropped, so the resumed run writes exactly the rows the uninterrupted run would have.

Checkpoints hold only tensors and plain containers (dict, list, tuple, str, int, float,
bool, None) and load with `torch.load(..., weights_only=True)`: unpickling arbitrary
objects could run code, so a checkpoint holding anything else is refused.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import torch

from lmpo.atomic import write_text
from lmpo.errors import LmpoError, RunError, deferred_stops
from lmpo.faults import crash_point

PLAIN = (str, int, float, bool, type(None), torch.Tensor)
CKPT = re.compile(r"^ckpt-(\d{6,})\.pt$")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointError(LmpoError, RuntimeError):
    """A checkpoint that cannot be used: damaged, or holding foreign objects."""


class CheckpointWriteError(RunError, OSError):
    """A checkpoint (or a metrics row) could not be written; says from where to resume."""


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


class FullWrites(io.RawIOBase):
    """A file torch writes into: every write completes or raises, and the OS error (no
    space, a size limit) is kept, since torch's zip writer reports only "unexpected pos"."""

    def __init__(self, raw):
        self.raw, self.error = raw, None

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view, done = memoryview(data), 0
        try:
            while done < len(view):
                done += self.raw.write(view[done:])
        except OSError as exc:
            self.error = exc
            raise
        return done


def manifest_path(ckpt: Path) -> Path:
    return ckpt.with_name(ckpt.name + ".json")


def file_digest(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return path.stat().st_size, digest.hexdigest()


def write_cause(exc: BaseException, recorded: OSError | None, folder: Path) -> str:
    """What made a write fail, in words: the OS error if there was one."""
    err = recorded or (exc if isinstance(exc, OSError) else None)
    if err is not None and err.errno is not None:
        cause = os.strerror(err.errno)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            cause += f" ({shutil.disk_usage(folder).free:,} bytes free)"
        return cause
    return f"the write failed ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"


def resume_hint(run_dir: Path) -> str:
    intact = [c for c in reversed(list_checkpoints(run_dir)) if damage(c) is None]
    if not intact:
        return "no checkpoint was written yet: start the run again"
    return f"resume from step {checkpoint_step(intact[0])} with --resume"


def save_checkpoint(run_dir: Path, step: int, state: dict, keep: int = 2) -> Path:
    check_plain(state)
    folder = Path(run_dir) / "checkpoints"
    final = folder / f"ckpt-{step:06d}.pt"
    tmp = folder / f".{final.name}.tmp"
    sink = None
    with deferred_stops():  # a stop mid-write waits for the checkpoint to be whole
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb", buffering=0) as raw:
                sink = FullWrites(raw)
                torch.save(state, sink)
                os.fsync(raw.fileno())
            size, sha = file_digest(tmp)
            crash_point("mid_checkpoint", step)
            write_text(manifest_path(final), json.dumps({"size": size, "sha256": sha}) + "\n")
            os.replace(tmp, final)
            _fsync_dir(folder)
        except (OSError, RuntimeError) as exc:
            tmp.unlink(missing_ok=True)
            if not final.exists():
                manifest_path(final).unlink(missing_ok=True)
            raise CheckpointWriteError(
                f"could not write checkpoint {final}: "
                f"{write_cause(exc, sink and sink.error, folder)}; nothing half-written was kept, "
                f"so {resume_hint(run_dir)}") from None
        for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
            old.unlink(missing_ok=True)
            manifest_path(old).unlink(missing_ok=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    folder = Path(run_dir) / "checkpoints"
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if CKPT.match(p.name)]
    return sorted(found, key=lambda p: int(CKPT.match(p.name).group(1)))


def checkpoint_step(path: Path) -> int:
    return int(CKPT.match(path.name).group(1))


def latest_checkpoint(run_dir: Path) -> Path | None:
    ckpts = list_checkpoints(run_dir)
    return ckpts[-1] if ckpts else None


def damage(path: Path) -> str | None:
    """Why the checkpoint at `path` cannot be trusted, or None if it is intact."""
    manifest = manifest_path(path)
    if manifest.exists():
        try:
            want = json.loads(manifest.read_text())
            size, sha = int(want["size"]), str(want["sha256"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            return f"its record {manifest.name} is unreadable"
        have = path.stat().st_size
        if have != size:
            return f"{have:,} bytes where {size:,} were written"
        if file_digest(path)[1] != sha:
            return "its SHA-256 differs from the one recorded when it was written"
        return None
    try:  # written before checksums were recorded: the archive's own CRCs
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
        return None if bad is None else f"a corrupt member ({bad})"
    except (zipfile.BadZipFile, OSError) as exc:
        return f"not a readable checkpoint archive ({exc})"


def latest_intact_checkpoint(run_dir: Path, notice=print) -> Path | None:
    """The newest checkpoint that verifies; each damaged newer one is reported in one line
    (`notice`). None when there is none; CheckpointError when all of them are damaged."""
    ckpts = list_checkpoints(run_dir)
    damaged = []
    for ckpt in reversed(ckpts):
        reason = damage(ckpt)
        if reason is None:
            if damaged:
                notice(f"lmpo: resuming from {ckpt.name} (step {checkpoint_step(ckpt)}): the "
                       f"newer {', '.join(damaged)} is damaged")
            return ckpt
        damaged.append(f"{ckpt.name} ({reason})")
    if damaged:
        raise CheckpointError(f"no intact checkpoint in {Path(run_dir) / 'checkpoints'}: "
                              f"{'; '.join(damaged)}; start the run again in a new directory")
    return None


def load_checkpoint(path: Path) -> dict:
    """Verify, then load with `weights_only=True`; anything but tensors and plain
    containers is refused."""
    reason = damage(path)
    if reason is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: {reason}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"refusing to load {path}: it holds objects other than tensors and plain "
            f"containers, and unpickling them could run code ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    except (RuntimeError, OSError, EOFError) as exc:
        raise CheckpointError(f"checkpoint {path} is damaged: "
                              f"{str(exc).splitlines()[0] if str(exc) else exc}") from None


def append_row(path: Path, row: dict) -> None:
    """Append one metrics row, fsynced; a failed write says from where to resume (a torn
    last line is dropped on resume)."""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise CheckpointWriteError(
            f"could not append step {row.get('step')} to {path}: "
            f"{write_cause(exc, None, Path(path).parent)}; {resume_hint(Path(path).parent)}"
        ) from None


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


WALL_CLOCK = ("trl/step_time",)  # timings an engine logs outside time/*


def untimed_rows(path: Path) -> list[dict]:
    """The rows of a metrics.jsonl without their wall-clock timings (time/*, TRL's step
    time): what two runs of one config at one thread count write identically, however they
    were launched or interrupted."""
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in WALL_CLOCK}
            for r in read_rows(path)]


def truncate_rows(path: Path, last_step: int) -> None:
    """Keep only rows with step <= last_step (atomically rewritten)."""
    rows = [r for r in read_rows(path) if r.get("step", 0) <= last_step]
    tmp = Path(path).with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.replace(tmp, path)
