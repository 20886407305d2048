"""The resolved config keys experiments reason about: which never count as a difference
between arms, and whether a key falls under a list of allowed prefixes."""

from __future__ import annotations

PER_RUN_KEYS = ("seed", "threads")  # differ between runs by design, never between arms
NEVER_COUNT = ("seed", "threads", "log", "imports")  # no claim is confounded by these
COMPARATOR_KEY = "log.comparators"  # follows from the claims: never an arm's own setting


def covered(key: str, prefixes: list[str]) -> bool:
    """Whether `key` is one of `prefixes` or lies under one (`loss.hparams.x` under `loss`)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)
