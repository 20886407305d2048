"""The resolved config keys experiments reason about: which never count as a difference
between arms, and whether a key falls under a list of allowed prefixes."""

from __future__ import annotations

# differ between runs by design (a run's seed, and with it its warm start's), never
# between arms
PER_RUN_KEYS = ("seed", "policy_seed", "threads")
NEVER_COUNT = ("seed", "policy_seed", "threads", "log", "imports")  # never a confound
COMPARATOR_KEY = "log.comparators"  # follows from the claims: never an arm's own setting


def covered(key: str, prefixes: list[str]) -> bool:
    """Whether `key` is one of `prefixes` or lies under one (`loss.hparams.x` under `loss`)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)
