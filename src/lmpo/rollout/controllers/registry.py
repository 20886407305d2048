"""The rollout-controller registry (`build_controller`, `list_controllers`).

A controller acts during decoding: it may end a response early. Each controller is a
class registered here with keyword-only hyper-parameters, validated when it is built
(a bad value is a one-line error naming the key). The run supplies `CONTEXT`
(`total_steps`, `seed`, `failure_reward`: a failed response's reward, `reward_range`:
(lowest, highest)) to a controller that accepts them; they are never hyper-parameters.
"""

from __future__ import annotations

from lmpo.registry import DEFAULT_CONTROLLER, Registry  # noqa: F401 (re-exported)

CONTROLLERS = Registry("rollout controller", defaults={
    "diagnostics": (), "engagement": None, "preset_keys": (), "title": "", "source": "",
    "mediates": ("rollout_tokens", "update_share"),  # what stopping changes by design
    "summary": "", "example": {},  # example: hparams that make a valid instance
    "twin": None, "readings": ()})
CONTEXT = ("total_steps", "seed", "failure_reward", "reward_range")


def controller_hparams(name: str) -> dict:
    """Hyper-parameters of controller `name` and their defaults (the run's context aside)."""
    return {k: v for k, v in CONTROLLERS.hparams(name).items() if k not in CONTEXT}


def build_controller(name: str, hparams: dict | None = None, *, total_steps: int | None = None,
                     seed: int = 0, failure_reward: float | None = 0.0,
                     reward_range: tuple = (0.0, 1.0)):
    """Controller `name` with `hparams`, given the run's `CONTEXT` where it takes it (by
    default a reward in [0, 1] whose failures score 0)."""
    hparams = dict(hparams or {})
    clash = sorted(set(hparams) & set(CONTEXT))
    if clash:
        raise TypeError(f"{clash} come from the run (steps, seed, reward), not from "
                        "controller.hparams")
    accepted = CONTROLLERS.hparams(name)
    CONTROLLERS.check_hparams(name, hparams)
    given = {"total_steps": total_steps, "seed": seed, "failure_reward": failure_reward,
             "reward_range": tuple(reward_range)}
    context = {k: v for k, v in given.items() if k in accepted}
    return CONTROLLERS.get(name, **hparams, **context)


def list_controllers() -> list[str]:
    return CONTROLLERS.names()


# The section that named ESPO before controllers had a registry. A config that still has
# it fails with REPLACED; a saved run's config is upgraded by `upgrade_saved`.
LEGACY_SECTION = "espo"
REPLACED = ("was replaced by `controller: {name, hparams}`: espo.enabled=true -> "
            "controller.name=espo (espo.mode=random -> controller.name=random_stop); every "
            "other espo.KEY -> controller.hparams.KEY")


def upgrade_saved(data: dict) -> dict:
    """A saved run config with the old section, rewritten with `controller:` (hyper-
    parameters the named controller does not take are dropped: they had no effect)."""
    if LEGACY_SECTION not in data:
        return data
    data = dict(data)
    old = dict(data.pop(LEGACY_SECTION) or {})
    if not old.get("enabled"):
        data.setdefault("controller", {"name": "none", "hparams": {}})
        return data
    name = "random_stop" if old.get("mode") == "random" else "espo"
    accepted = controller_hparams(name)
    data["controller"] = {"name": name,
                          "hparams": {k: v for k, v in old.items() if k in accepted}}
    return data
