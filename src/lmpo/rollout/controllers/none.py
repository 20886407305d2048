"""The default controller: nothing ends a response before EOS or the token budget."""

from __future__ import annotations

import torch

from lmpo.rollout.controllers.registry import CONTROLLERS


@CONTROLLERS.register("none", title="none", source="-", mediates=(),
                      summary="no rollout controller: responses end at EOS or the budget")
class NoController:
    """Stops nothing, scores nothing, measures nothing, holds no state."""

    needs_values = False
    stop_score = None
    bootstraps = False

    def begin_batch(self, batch_size: int) -> None:
        pass

    def step(self, rows, regret, values, t) -> torch.Tensor:
        return torch.zeros(len(rows), dtype=torch.bool)

    def end_batch(self, regret, lengths) -> None:
        pass

    def diagnose(self, ctx) -> dict[str, float]:
        return {}

    def observe(self, row: dict, step: int) -> None:
        pass

    def metrics(self) -> dict[str, float]:
        return {}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"the 'none' controller holds no state; got keys {sorted(state)}")
