"""Keys only the built-in testbed can use: a config on your own data states them.

The shipped train presets (and the config defaults) describe the nano testbed: the warm
started `nano-chain-sum` policy, chain-sum's `t3d1` cluster and 24-token answers. A method
preset used on your own dataset would inherit them silently (a JSONL without a `cluster`
column has no `t3d1`; a real model's answers do not fit in 24 tokens), so when `task` is a
dataset file or folder each key below must come from the user: their own config file,
the experiment's `base:` or arm overrides, or the command line.
"""

from __future__ import annotations

from lmpo.config import flatten
from lmpo.errors import ConfigError
from lmpo.tasks.jsonl import is_dataset_path

TESTBED_KEYS = ("policy", "rollout.clusters", "rollout.max_new_tokens",
                "log.eval_max_new_tokens")


def check_testbed_keys(data: dict, own: set[str], defaults: dict) -> None:
    """Refuse a config whose `task` is the user's dataset but some TESTBED_KEYS only come
    from a shipped preset or the `defaults` (dotted keys; `own`: the keys the user set)."""

    task = data.get("task", defaults["task"])
    if not isinstance(task, str) or not is_dataset_path(task):
        return
    flat = flatten(data)
    inherited = [f"{key}={flat.get(key, defaults[key])!r}" for key in TESTBED_KEYS
                 if key not in own]
    if inherited:
        raise ConfigError(
            f"task {task} is your own data, but the built-in testbed's values (from a shipped "
            f"preset or the defaults) would apply: {', '.join(inherited)}; set each yourself, "
            "in your config or as key=value (rollout.clusters=null trains on every cluster; "
            "docs/tutorial.md)")
