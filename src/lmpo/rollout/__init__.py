"""Rollouts: batched KV-cache sampling that records log-probs, regret and values, the
rollout controllers that may stop a sequence early (ESPO, variant F), the model that
samples (precision, staleness) and the corrections for its mismatch with the update."""

from lmpo.choices import ROLLOUT_DTYPES
from lmpo.models.forward import IncrementalValues
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
from lmpo.rollout.corrections import (
    CORRECTIONS,
    Correction,
    correction_hparams,
    get_correction,
    list_corrections,
)
from lmpo.rollout.precision import RolloutModel
from lmpo.rollout.sampler import left_pad, sample, sampling_mode
from lmpo.rollout.types import STOP_REASONS, Rollout

__all__ = ["CONTROLLERS", "CORRECTIONS", "ESPO", "ROLLOUT_DTYPES", "STOP_REASONS",
           "Correction", "IncrementalValues", "RandomStop", "Rollout", "RolloutContext",
           "RolloutController", "RolloutModel", "build_controller", "controller_hparams",
           "correction_hparams", "get_correction", "left_pad", "list_controllers",
           "list_corrections", "sample", "sampling_mode"]
