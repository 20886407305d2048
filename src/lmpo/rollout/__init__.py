"""Rollouts: batched KV-cache sampling that records log-probs, regret and values,
and the rollout controllers that may stop a sequence early (ESPO, variant F)."""

from lmpo.rollout.controller import (
    CONTROLLERS,
    RandomStop,
    RolloutController,
    build_controller,
)
from lmpo.rollout.espo import ESPO
from lmpo.rollout.sampler import left_pad, sample, sampling_mode
from lmpo.rollout.types import STOP_REASONS, Rollout
from lmpo.rollout.values import IncrementalValues

__all__ = ["CONTROLLERS", "ESPO", "STOP_REASONS", "IncrementalValues", "RandomStop", "Rollout",
           "RolloutController", "build_controller", "left_pad", "sample",
           "sampling_mode"]
