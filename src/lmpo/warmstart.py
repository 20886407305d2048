"""Warm-start policies by name, built once per user and reused (`policy: nano-chain-sum`).

A name is an SFT preset (`lmpo presets`). The first use runs that SFT into the user
cache, `$LMPO_HOME/policies/<name>-<key>/`, keyed by everything that determines it
(`lmpo.cache`); later uses check it and load it.
Concurrent first uses (two runs of a sweep) build it once. A path to a Hugging Face
folder is used as it is; a packaged real model's name (`smollm2-135m-instruct`) is
converted once into `$LMPO_HOME/models/` (`lmpo.models.convert`).

A warm start is the same on every machine only up to floating point: 800 SFT steps on
another CPU's kernels end at other weights (the nano warm starts' held-out accuracy
differs by about a point between an Intel Xeon and an AMD EPYC). A sweep that spans
machines therefore pins its warm starts: `lmpo compare` copies each one its runs start
from into the sweep's `warmstarts/<name>/` on first use and points its runs there through
`LMPO_WARMSTARTS`, which `resolve_policy` reads before the cache.

A seeded warm start (`policy_seed: 41`, which `lmpo compare` sets to each run's seed) is
the preset's SFT with its own seed, cached and pinned as `<name>-seed41`: each training
seed then replicates the whole pipeline, its own SFT draw included.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from lmpo import presets
from lmpo.cache import build_once, cache_key, lmpo_home
from lmpo.devices import resolved_name
from lmpo.errors import ConfigError

PINNED_ENV = "LMPO_WARMSTARTS"  # a folder of pinned warm starts, <name>/ each


def is_preset(spec: str) -> bool:
    """Whether `spec` names an SFT warm-start preset (not a folder, not a packaged model)."""
    from lmpo.models.convert import REAL_MODELS

    return (spec not in REAL_MODELS and not presets.looks_like_file(spec)
            and not Path(spec).expanduser().exists() and presets.find(spec, "sft") is not None)


def pinned_name(name: str, seed: int | None = None) -> str:
    """The folder name of warm start `name` (drawn with SFT seed `seed`) in a sweep."""
    return name if seed is None else f"{name}-seed{seed}"


def seed_overrides(seed: int | None) -> tuple[str, ...]:
    return () if seed is None else (f"seed={seed}",)


def pinned_policy(name: str, seed: int | None = None) -> Path | None:
    """The pinned copy of warm start `name` under `$LMPO_WARMSTARTS`, if there is one."""
    root = os.environ.get(PINNED_ENV)
    folder = Path(root) / pinned_name(name, seed) if root else None
    return folder if folder is not None and (folder / "config.json").is_file() else None


def pin(name: str, root: Path, seed: int | None = None) -> Path:
    """`root/name` (`root/name-seed<k>` for SFT seed k): warm start `name` as this sweep's
    runs use it, copied from the cache (built first if missing) unless the sweep pinned it
    already."""
    final = root / pinned_name(name, seed)
    if (final / "config.json").is_file():
        return final
    source = cached_policy(name, sft_overrides=seed_overrides(seed))
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=root))
    try:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
        config = tmp / "sft_config.yaml"  # without the cache folder it was built in
        if config.is_file():
            config.write_text("".join(line for line in config.read_text().splitlines(True)
                                      if not line.startswith("out:")))
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def sft_config(name: str, sft_overrides: tuple[str, ...] = ()):
    from lmpo.config import load_config
    from lmpo.sft import SFTConfig

    return load_config(SFTConfig, name, list(sft_overrides))


def cache_entry(name: str, sft_overrides: tuple[str, ...] = ()) -> tuple[Path, dict]:
    """(the cache folder of SFT preset `name`, the inputs its key hashes): the resolved
    SFT config (its threads included, so the policy never depends on which command built
    it first), the source of lmpo.sft and what it imports, the library versions."""
    from lmpo.config import to_dict

    config = to_dict(sft_config(name, sft_overrides))
    config.pop("out")
    config["device"] = resolved_name(config["device"])  # a GPU-built policy is another
    key, inputs = cache_key("policy", config, "lmpo.sft")
    return lmpo_home() / "policies" / f"{name}-{key}", inputs


def resolve_policy(spec: str, *, progress: bool = True, sft_overrides: tuple[str, ...] = (),
                   seed: int | None = None) -> Path:
    """The model folder `spec` names: a local Hugging Face folder, or the cached (built on
    first use, with the preset's own threads) warm start of the SFT preset `spec` (drawn
    with SFT seed `seed` where given; a folder or a packaged model ignores it)."""
    from lmpo.models.convert import real_model

    kind = check_policy(spec)
    if kind == "folder":
        return Path(spec).expanduser()
    if kind == "packaged":
        return real_model(spec)
    pinned = None if sft_overrides else pinned_policy(spec, seed)
    return pinned or cached_policy(spec, progress=progress,
                                   sft_overrides=(*sft_overrides, *seed_overrides(seed)))


def check_policy(spec: str) -> str:
    """What `spec` names, checked without building anything: "folder" (a Hugging Face
    model folder whose config.json reads), "packaged" (a packaged real model) or "preset"
    (a warm-start preset); else one ConfigError saying what it may be, with the nearest
    preset name."""
    import json

    from lmpo.models.convert import REAL_MODELS
    from lmpo.registry import nearest

    path = Path(spec).expanduser()
    if (path / "config.json").is_file():
        try:
            json.loads((path / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"policy {spec!r}: its config.json does not read ({exc})") \
                from None
        return "folder"
    if spec in REAL_MODELS:
        return "packaged"
    if is_preset(spec):
        return "preset"
    names = presets.names("sft")
    raise ConfigError(f"policy {spec!r} is neither a Hugging Face model folder (no "
                      f"config.json there), a packaged model ({', '.join(REAL_MODELS)}) "
                      f"nor a warm-start preset{nearest(spec, [*names, *REAL_MODELS])}; "
                      f"warm-start presets: {', '.join(names)}")


def cached_policy(name: str, *, progress: bool = True, sft_overrides: tuple[str, ...] = ()
                  ) -> Path:
    """The cache entry of SFT preset `name`, built under a file lock if it is missing or
    fails its check."""
    final, inputs = cache_entry(name, sft_overrides)

    def build(tmp: Path) -> None:
        from lmpo.sft import run_sft

        cfg = sft_config(name, sft_overrides)
        cfg.out = str(tmp)
        print(f"lmpo: building the warm-start policy {name!r} on first use "
              f"({cfg.steps} SFT steps on {cfg.threads} thread{'s' * (cfg.threads != 1)}; "
              f"cached in {tmp.parent})",
              flush=True)
        run_sft(cfg, progress=progress)

    return build_once(final, build, inputs)
