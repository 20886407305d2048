"""The user cache, `$LMPO_HOME` (default `~/.cache/lmpo`): folders built once and reused.

`build_once(final, build)` makes a model folder on first use: the builder holds an
exclusive file lock, writes into a temporary folder next to `final` and renames it into
place, so concurrent first uses build it once and no reader ever sees a half-written
folder. Warm-start policies (`lmpo.warmstart`), reward models
(`lmpo.reward_model_training`) and converted real models (`lmpo.models.convert`) live
here.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

HOME_ENV = "LMPO_HOME"


def lmpo_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or "~/.cache/lmpo").expanduser()


def build_once(final: Path, build) -> Path:
    """`final` (a model folder), made by `build(tmp)` into a temporary folder next to it
    and renamed into place under an exclusive file lock, unless it already exists."""
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if (final / "config.json").is_file():  # another process built it meanwhile
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            build(tmp)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final
