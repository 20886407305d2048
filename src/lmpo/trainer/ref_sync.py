"""The reference policy moved toward the policy every N steps (TRL's `sync_ref_model`:
`ref_model_sync_steps`, `ref_model_mixup_alpha`; TR-DPO's soft update):

    after step k, if k % every == 0:   ref <- (1 - alpha) ref + alpha pi

on every parameter (float32; buffers are the policy's own and stay). The reference then
is state, not the start: its weights are checkpointed with the run, so a resumed run's
KL reads the reference it had (`kl.ref_sync_every`, `kl.ref_sync_alpha`)."""

from __future__ import annotations

import torch


class ReferenceSync:
    """Mixes `reference` toward `policy` after every `every`-th step; checkpointed."""

    def __init__(self, reference: torch.nn.Module, policy: torch.nn.Module, every: int,
                 alpha: float):
        if every < 1 or not 0 < alpha <= 1:
            raise ValueError(f"reference sync needs every >= 1 and 0 < alpha <= 1, got "
                             f"{every}, {alpha}")
        self.reference, self.policy, self.every, self.alpha = reference, policy, every, alpha
        self.syncs = 0

    @torch.no_grad()
    def step_end(self, step: int) -> dict[str, float]:
        """Mix on every `every`-th step; `kl/ref_syncs`: how many mixes so far."""
        if step % self.every == 0:
            for ref, live in zip(self.reference.parameters(), self.policy.parameters(),
                                 strict=True):
                ref.mul_(1 - self.alpha).add_(live.detach().to(ref.dtype), alpha=self.alpha)
            self.syncs += 1
        return {"kl/ref_syncs": float(self.syncs)}

    def state_dict(self) -> dict:
        return {"reference": {k: v.clone() for k, v in self.reference.state_dict().items()},
                "syncs": self.syncs}

    def load_state_dict(self, state: dict) -> None:
        self.reference.load_state_dict(state["reference"])
        self.syncs = int(state["syncs"])


def build_reference_sync(cfg, reference, policy) -> ReferenceSync | None:
    """kl.ref_sync_every > 0: the run's ReferenceSync; None otherwise."""
    if not cfg.kl.ref_sync_every:
        return None
    return ReferenceSync(reference, policy, cfg.kl.ref_sync_every, cfg.kl.ref_sync_alpha)
