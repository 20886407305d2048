"""Per-step critic values during sampling, with the critic's own KV cache."""

from __future__ import annotations

import torch

from lmpo.masked import position_ids
from lmpo.rollout.sampler import cached_forward


class IncrementalValues:
    """Adapts a `lmpo.models.ValueModel` to the sampler: V(s_t) for each active row.

    The sampler calls `prefill` on the prompts, `step` after each new token and
    `select` when finished rows leave the batch.
    """

    def __init__(self, value_model):
        self.model = value_model
        self.cache = None

    def _run(self, **kw) -> torch.Tensor:
        out, self.cache = cached_forward(self.model.trunk, self.cache, **kw)
        return self.model.head(out.last_hidden_state[:, -1]).squeeze(-1)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.cache = None
        return self._run(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask))

    def step(self, token: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self._run(input_ids=token, attention_mask=mask, position_ids=pos)

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)
