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

    def __init__(self, trunk: nn.Module, hidden_size: int):
        super().__init__()
        self.trunk = trunk
        self.head = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    @classmethod
    def from_policy(cls, policy) -> ValueModel:
        """Initialise from a copy of the policy's trunk (the LM head is dropped)."""
        trunk = copy.deepcopy(policy.get_decoder() if hasattr(policy, "get_decoder")
                              else policy.model)
        return cls(trunk, policy.config.hidden_size)

    def values(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.trunk(input_ids=input_ids, attention_mask=attention_mask,
                            position_ids=position_ids(attention_mask)).last_hidden_state
        return self.head(hidden).squeeze(-1)

    forward = values
