"""Everything a run carries from one step to the next, in one place.

`RunState.state_dict()` asks each part for its own state, so adding a part
(a new estimator, a rollout controller) is one field here, never a mirrored
save/restore list in the loop. The result holds only tensors and plain
containers, so checkpoints load with `torch.load(..., weights_only=True)`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

import torch

from lmpo.rollout import RolloutController
from lmpo.tasks import Sampler
from lmpo.trainer.checkpoint import CheckpointError
from lmpo.trainer.history import PolicyHistory
from lmpo.trainer.protocols import Observer, Stateful
from lmpo.trainer.schedules import Schedules

PART = {"part": True}  # a field checkpointed through its own state_dict


@dataclass
class Counters:
    tokens: int = 0  # generated tokens so far (tokens/cumulative)
    nonfinite_streak: int = 0  # consecutive non-finite updates
    skipped: int = 0  # updates skipped because a term went non-finite


@dataclass
class RunState:
    """The run's state; the fields marked `PART` are checkpointed by their own state_dict."""

    policy: torch.nn.Module = field(metadata=PART)
    reference: torch.nn.Module  # in memory; checkpointed only when it moves (ref_sync)
    opt: torch.optim.Optimizer = field(metadata=PART)
    sampler: Sampler = field(metadata=PART)
    estimator: Stateful = field(metadata=PART)  # either family's estimator
    critic: torch.nn.Module | None = field(default=None, metadata=PART)
    critic_opt: torch.optim.Optimizer | None = field(default=None, metadata=PART)
    controller: RolloutController | None = field(default=None, metadata=PART)
    # a reward model's running score moments (reward.normalize)
    reward_norm: Stateful | None = field(default=None, metadata=PART)
    # the policy versions stale rollouts sample with (rollout.staleness)
    history: PolicyHistory | None = field(default=None, metadata=PART)
    # adaptive KL / entropy coefficients (lmpo.trainer.schedules)
    schedules: Schedules | None = field(default=None, metadata=PART)
    # the reference's soft updates toward the policy (kl.ref_sync_every; its weights)
    ref_sync: Stateful | None = field(default=None, metadata=PART)
    # what watches the step without changing it (same-batch comparators: lmpo.trainer.comparators),
    # each checkpointed under its own key
    observers: list[Observer] = field(default_factory=list)
    rngs: dict[str, torch.Generator] = field(default_factory=dict)
    counters: Counters = field(default_factory=Counters)
    step: int = 0
    before: dict | None = None  # the evaluation before training
    final: dict | None = None  # the per-sample records of the last step's evaluation

    @classmethod
    def parts(cls) -> tuple[str, ...]:
        """The checkpointed parts, in the order they are saved."""
        return tuple(f.name for f in fields(cls) if f.metadata.get("part"))

    def state_dict(self) -> dict:
        parts = {name: getattr(self, name) for name in self.parts()}
        return {
            "step": self.step, "before": self.before, "final": self.final,
            "counters": asdict(self.counters),
            "rngs": {k: g.get_state() for k, g in self.rngs.items()},
            "torch_rng": torch.get_rng_state(),
            **{name: None if part is None else part.state_dict() for name, part in parts.items()},
            **{obs.key: obs.state_dict() for obs in self.observers},
        }

    def load_state_dict(self, state: dict) -> None:
        self.step, self.before = state["step"], state["before"]
        self.final = state.get("final")  # older checkpoints have none
        self.counters = Counters(**state["counters"])
        for name in self.parts():
            part, saved = getattr(self, name), state.get(name)  # older checkpoints lack parts
            if (part is None) != (saved is None):
                raise CheckpointError(f"checkpoint {'has no' if saved is None else 'has a'} "
                                 f"{name} state but this run {'has' if part else 'has none'}")
            if part is not None:
                part.load_state_dict(saved)
        for obs in self.observers:  # log.* may change on resume: a new one starts fresh
            obs.load_state_dict(state.get(obs.key) or {})
        if set(state["rngs"]) != set(self.rngs):
            raise CheckpointError(f"checkpoint generators {sorted(state['rngs'])} differ from this "
                             f"run's {sorted(self.rngs)}")
        for k, g in self.rngs.items():
            g.set_state(state["rngs"][k])
        torch.set_rng_state(state["torch_rng"])
