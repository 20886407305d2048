"""Reading an engine's config object (a dataclass, an OmegaConf node or a dict) without
importing the engine: the adapters look up the settings a loss declares for them."""

from __future__ import annotations


def setting(config, key: str, default=None):
    """`config.key` (or `config[key]` for a dict); `default` where it is missing."""
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    return getattr(config, key, default)


def setting_path(config, dotted: str):
    """`config.a.b` for "a.b" (None wherever a link is missing)."""
    for key in dotted.split("."):
        config = setting(config, key)
    return config
