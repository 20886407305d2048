"""The parts a train config names, built: the trainer builds them, the config stays data.

`build_parts(cfg)` gives what the run uses and keeps no state of its own (the loss and
its aggregation, the rollout correction, the post-update diagnostics, the advantage
stage of the estimator's family, the objective); the parts with state, the estimator and
the rollout controller, are built by `build_estimator` and `build_controller_of` and live
in the run's checkpointed state alone. Every bad value fails here as a ConfigError
naming its key (`check_parts`, called by validation). The same-batch comparators
(`lmpo.trainer.comparators`) build their parts with the same functions (`loss_part`,
`estimator_part`, `controller_part`), so a comparator's part is the part a run naming it
would get.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmpo.advantages import advantage_meta, get_advantage, list_advantages
from lmpo.config import ConfigError
from lmpo.losses import default_aggregation, get_loss
from lmpo.losses.diagnostics import bind_post_update
from lmpo.rewards import reward_range
from lmpo.rollout import build_controller
from lmpo.rollout.corrections.chain import build_correction
from lmpo.trainer.advantage import advantage_stage
from lmpo.trainer.objective import Objective, build_objective
from lmpo.trainer.protocols import AdvantageStage, Correction, Loss
from lmpo.trainer.schedules import build_schedules


@dataclass
class Parts:
    """What a config names, built, without state (`build_parts`)."""

    loss_fn: Loss
    agg: str
    post_update: list  # post-update diagnostics, parameters bound
    advantages: AdvantageStage  # the advantage stage of the estimator's family
    correction: Correction | None = None  # the rollout correction, or None
    objective: Objective | None = None  # the update's terms (with the run's critic)


def built(key: str, make):
    """`make()`, its error as one line naming `key`."""
    try:
        return make()
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{key}: {exc.args[0] if exc.args else exc}") from None


def needs_critic(estimator: str) -> bool:
    """An estimator registered with `needs_critic` trains a critic (actor-critic)."""
    return estimator in list_advantages() and advantage_meta(estimator)["needs_critic"]


def loss_part(name: str, hparams: dict | None, agg: str | None = None) -> tuple[Loss, str]:
    """(the loss `name` with `hparams` bound, its aggregation: `agg`, else its default)."""
    return get_loss(name, **(hparams or {})), agg or default_aggregation(name)


def estimator_part(name: str, hparams: dict | None):
    """The advantage estimator `name` with `hparams` (fresh state)."""
    return get_advantage(name, **(hparams or {}))


def controller_part(cfg, name: str, hparams: dict | None):
    """The rollout controller `name` with `hparams`, for `cfg`'s run (its steps, seed and
    the reward's range)."""
    low, high, failure = reward_range(cfg.reward)
    return build_controller(name, hparams or {}, total_steps=cfg.steps, seed=cfg.seed,
                            failure_reward=failure, reward_range=(low, high))


def build_parts(cfg, critic=None) -> Parts:
    """The stateless parts of `cfg` (the loss called once on a dummy token) and, with the
    run's critic (or None), the objective."""
    loss, corr = cfg.loss, cfg.rollout.correction
    loss_fn, agg = built("loss", lambda: loss_part(loss.name, loss.hparams, loss.agg))
    one = torch.ones(1, 1)
    built("loss.hparams", lambda: loss_fn(one - 2, one - 2, one[0], one))
    return Parts(
        loss_fn=loss_fn, agg=agg,
        post_update=built("log.diagnostics", lambda: bind_post_update(
            loss.name, loss.hparams, cfg.log.diagnostics)),
        advantages=advantage_stage(cfg.advantage.name),
        correction=built("rollout.correction", lambda: build_correction(corr.links())),
        objective=build_objective(cfg, loss_fn, agg, critic))


def build_estimator(cfg):
    est = cfg.advantage
    return built("advantage", lambda: estimator_part(est.name, est.hparams))


def build_controller_of(cfg):
    """The run's rollout controller (`none` stops nothing), with the reward's range."""
    ctl = cfg.controller
    return built("controller", lambda: controller_part(cfg, ctl.name, ctl.hparams))


def build_schedules_of(cfg):
    """The run's coefficient schedules (lmpo.trainer.schedules), or None if all fixed."""
    return built("kl.schedule / optim.entropy_schedule", lambda: build_schedules(cfg))


def check_parts(cfg) -> None:
    """Build every part `cfg` names, so that a bad value fails before any work."""
    build_parts(cfg)
    build_estimator(cfg)
    build_controller_of(cfg)
    build_schedules_of(cfg)
