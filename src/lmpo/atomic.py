"""Whole-or-nothing writes of bookkeeping files (a run's config.yaml and eval.json, a
sweep's experiment.yaml, configs and sweep.json, a report's files): the text goes to a
temporary file in the same directory, is fsynced, and is renamed over the target, so a
reader (or a resume after `kill -9`) sees the old file or the new one, never a part."""

from __future__ import annotations

import os
from pathlib import Path


def write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    try:  # the rename itself survives a power cut once the directory is synced
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
