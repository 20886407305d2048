"""Warm-start policies by name, built once per user and reused (`policy: nano-chain-sum`).

A name is an SFT preset (`lmpo presets`). The first use runs that SFT into the user
cache, `$LMPO_HOME/policies/<name>-<lmpo version>/` (`lmpo.cache`); later uses load it.
Concurrent first uses (two runs of a sweep) build it once. A path to a Hugging Face
folder is used as it is; a packaged real model's name (`smollm2-135m-instruct`) is
converted once into `$LMPO_HOME/models/` (`lmpo.models.convert`).
"""

from __future__ import annotations

from pathlib import Path

from lmpo import __version__, presets
from lmpo.cache import build_once, lmpo_home
from lmpo.errors import ConfigError


def cache_entry(name: str) -> Path:
    return lmpo_home() / "policies" / f"{name}-{__version__}"


def resolve_policy(spec: str, *, progress: bool = True, sft_overrides: tuple[str, ...] = (),
                   max_threads: int | None = None) -> Path:
    """The model folder `spec` names: a local Hugging Face folder, or the cached (built on
    first use) warm start of the SFT preset `spec`, built with the preset's threads or
    `max_threads` if that is fewer (`lmpo train`'s `threads`)."""
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
    return cached_policy(spec, progress=progress, sft_overrides=sft_overrides,
                         max_threads=max_threads)


def cached_policy(name: str, *, progress: bool = True, sft_overrides: tuple[str, ...] = (),
                  max_threads: int | None = None) -> Path:
    """The cache entry of SFT preset `name`, built under a file lock if it is missing (with
    at most `max_threads` torch threads)."""

    def build(tmp: Path) -> None:
        from lmpo.config import load_config
        from lmpo.sft import SFTConfig, run_sft

        cfg = load_config(SFTConfig, name, [*sft_overrides, f"out={tmp}"])
        if max_threads is not None:
            cfg.threads = min(cfg.threads, max_threads)
        print(f"lmpo: building the warm-start policy {name!r} on first use "
              f"({cfg.steps} SFT steps on {cfg.threads} thread{'s' * (cfg.threads != 1)}; "
              f"cached in {tmp.parent})",
              flush=True)
        run_sft(cfg, progress=progress)

    return build_once(cache_entry(name), build)
