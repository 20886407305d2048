"""Rollouts: batched KV-cache sampling that records log-probs, regret and values,
and the rollout controllers that may stop a sequence early (ESPO, variant F)."""

from lmpo.rollout.controllers import (
    CONTROLLERS,
    ESPO,
    RandomStop,
    RolloutContext,
    RolloutController,
    build_controller,
    controller_hparams,
    list_controllers,
)
from lmpo.rollout.sampler import left_pad, sample, sampling_mode
from lmpo.rollout.types import STOP_REASONS, Rollout
from lmpo.rollout.values import IncrementalValues

__all__ = ["CONTROLLERS", "ESPO", "STOP_REASONS", "IncrementalValues", "RandomStop",
           "Rollout", "RolloutContext", "RolloutController", "build_controller",
           "controller_hparams", "left_pad", "list_controllers", "sample", "sampling_mode"]
