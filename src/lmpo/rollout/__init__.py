"""Rollouts: batched KV-cache sampling that records log-probs, regret and values,
and the ESPO early-stopping controller."""

from lmpo.rollout.espo import ESPO
from lmpo.rollout.sampler import left_pad, sample
from lmpo.rollout.types import STOP_REASONS, Rollout
from lmpo.rollout.values import IncrementalValues

__all__ = ["ESPO", "STOP_REASONS", "IncrementalValues", "Rollout", "left_pad", "sample"]
