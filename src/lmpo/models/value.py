"""The critic for actor-critic PPO (PPO-clip, PPO-OR, ESPO).

lmpo's critic is a *separate* small model: a copy of the policy's transformer
trunk plus a scalar head. Separate weights mean the value loss never pulls on
the policy's features and the two can have their own learning rates, as in
verl and OpenRLHF; the cost (a second trunk) is small at the sizes lmpo trains
on a CPU. See docs/decisions.md.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from lmpo.masked import position_ids


class ValueModel(nn.Module):
    """V(s_t) for every position: `values(input_ids, attention_mask) -> [B, T]`."""

    def __init__(self, trunk: nn.Module, hidden_size: int, *, init: str = "zero",
                 seed: int = 0):
        super().__init__()
        self.trunk = trunk
        if init == "zero":  # V = 0 at the start
            self.head = nn.Linear(hidden_size, 1)
            nn.init.zeros_(self.head.weight)
            nn.init.zeros_(self.head.bias)
        elif init == "random":  # torch's default init, from its own seed (the run's other
            # random streams are untouched)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.head = nn.Linear(hidden_size, 1)
        else:
            raise ValueError(f"critic init {init!r} unknown; valid: zero, random")

    @classmethod
    def from_policy(cls, policy, *, init: str = "zero", seed: int = 0) -> ValueModel:
        """Initialise from a copy of the policy's trunk (the LM head is dropped) and a new
        scalar head (`init`: zero or random)."""
        trunk = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder")
                              else policy.model)
        return cls(trunk, policy.config.hidden_size, init=init, seed=seed)

    def values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.trunk(input_ids=input_ids, attention_mask=attention_mask,
                            position_ids=position_ids(attention_mask)).last_hidden_state
        return self.head(hidden).squeeze(-1)

    forward = values
