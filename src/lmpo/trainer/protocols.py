"""What the run object holds, as types: the shapes of the parts the trainer calls.

The parts come from registries in the layers below (losses, estimators, controllers,
corrections), each of its own class; the trainer relies only on what is written here, so
`Parts`, `Run` and `RunState` name these instead of `Any`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class Stateful(Protocol):
    """A part whose state is checkpointed with the run (`RunState.state_dict`)."""

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class Loss(Protocol):
    """A registered policy loss, hyper-parameters bound (`lmpo.losses.get_loss`): per-token
    losses [B, T] and its metrics."""

    def __call__(self, logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                 mask: torch.Tensor) -> tuple[torch.Tensor, dict]: ...


class AdvantageStage(Protocol):
    """The advantage stage of an estimator's family (`lmpo.trainer.advantage`): fills the
    batch's advantages (and returns) and gives the step's advantage metrics."""

    def __call__(self, state, batch, scored, cfg) -> dict: ...


class Corrected(Protocol):
    """What a rollout correction returns: its token mask (or None) and metrics."""

    mask: torch.Tensor | None
    metrics: dict


class Correction(Protocol):
    """A rollout correction or chain (`lmpo.rollout.corrections`), called on the log-ratio
    of the trained policy to the rollout policy and the response mask."""

    def __call__(self, log_ratio: torch.Tensor, mask: torch.Tensor) -> Corrected: ...


@runtime_checkable
class Observer(Stateful, Protocol):
    """Watches a step without changing it (the same-batch comparators), checkpointed under
    its `key`."""

    key: str

    def begin_step(self, state, batch, scored, cfg, *, diagnostic: bool) -> None: ...

    def micro(self, logp: torch.Tensor, policy_term: torch.Tensor, batch, micro: torch.Tensor,
              m: torch.Tensor, counts: dict, agg: str, params: list) -> None: ...

    def end_minibatch(self) -> None: ...

    def end_step(self, row: dict, step: int) -> dict: ...
