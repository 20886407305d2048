"""Warm-start policies and reward models by name, built once per user and reused
(`policy: nano-chain-sum`, `reward.model: nano-chain-sum-rm`).

A name is an SFT preset (`lmpo presets`). The first use runs that SFT into the
user cache, `$LMPO_HOME/policies/<name>-<lmpo version>/` (`LMPO_HOME` defaults to
`~/.cache/lmpo`); later uses load it. Concurrent first uses (two runs of a sweep)
build it once: the builder holds an exclusive file lock, writes into a temporary
folder next to the entry and renames it into place, so no reader ever sees a
half-written folder. An rm preset's model is cached the same way in
`$LMPO_HOME/reward_models/`. A path to a Hugging Face folder is used as it is; a packaged
real model's name (`smollm2-135m-instruct`) is converted once into
`$LMPO_HOME/models/` (`lmpo.models.convert`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from lmpo import __version__, presets
from lmpo.errors import ConfigError

HOME_ENV = "LMPO_HOME"


def lmpo_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or "~/.cache/lmpo").expanduser()


def cache_entry(name: str) -> Path:
    return lmpo_home() / "policies" / f"{name}-{__version__}"


def resolve_policy(spec: str, *, progress: bool = True, sft_overrides: tuple[str, ...] = ()
                   ) -> Path:
    """The model folder `spec` names: a local Hugging Face folder, or the cached (built on
    first use) warm start of the SFT preset `spec`."""
    from lmpo.models.convert import REAL_MODELS, real_model

    path = Path(spec).expanduser()
    if (path / "config.json").is_file():
        return path
    if spec in REAL_MODELS:
        return real_model(spec)
    if presets.looks_like_file(spec) or path.exists() or presets.find(spec, "sft") is None:
        raise ConfigError(f"policy {spec!r} is neither a Hugging Face model folder (no "
                          f"config.json there), a packaged model ({', '.join(REAL_MODELS)}) "
                          f"nor a warm-start preset; warm-start presets: "
                          f"{', '.join(presets.names('sft'))}")
    return cached_policy(spec, progress=progress, sft_overrides=sft_overrides)


def cached_policy(name: str, *, progress: bool = True, sft_overrides: tuple[str, ...] = ()
                  ) -> Path:
    """The cache entry of SFT preset `name`, built under a file lock if it is missing."""

    def build(tmp: Path) -> None:
        from lmpo.trainer.config import load_config
        from lmpo.trainer.sft import SFTConfig, run_sft

        cfg = load_config(SFTConfig, name, [*sft_overrides, f"out={tmp}"])
        print(f"lmpo: building the warm-start policy {name!r} on first use "
              f"({cfg.steps} SFT steps; cached in {tmp.parent})", flush=True)
        run_sft(cfg, progress=progress)

    return build_once(cache_entry(name), build)


def resolve_reward_model(spec: str, *, progress: bool = True) -> Path:
    """The reward-model folder `spec` names: a local Hugging Face folder, or the cached
    (trained on first use) model of the rm preset `spec`."""
    path = Path(spec).expanduser()
    if (path / "config.json").is_file():
        return path
    if presets.looks_like_file(spec) or path.exists() or presets.find(spec, "rm") is None:
        raise ConfigError(f"reward.model {spec!r} is neither a Hugging Face folder (no "
                          f"config.json there) nor an rm preset; rm presets: "
                          f"{', '.join(presets.names('rm'))}")

    def build(tmp: Path) -> None:
        from lmpo.trainer.config import load_config
        from lmpo.trainer.rm import RMConfig, run_rm

        cfg = load_config(RMConfig, spec, [f"out={tmp}"])
        print(f"lmpo: training the reward model {spec!r} on first use (cached in "
              f"{tmp.parent})", flush=True)
        run_rm(cfg, progress=progress)

    return build_once(lmpo_home() / "reward_models" / f"{spec}-{__version__}", build)


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
