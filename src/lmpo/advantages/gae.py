"""Generalised advantage estimation over right-padded (or holed) responses."""

from __future__ import annotations

import torch

from lmpo.advantages.base import ADVANTAGES
from lmpo.masked import masked_mean, masked_whiten


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0,
        lam: float = 0.95, bootstrap: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) per token.  # [B, T] x3 -> adv [B, T], returns [B, T]

    delta_t = r_t + gamma * V_next - V_t, A_t = delta_t + gamma * lam * A_next, where
    "next" is the next *valid* position of the same row: masked positions are
    skipped (their rewards and values never enter), and after a row's last valid
    token V_next = A_next = 0 (terminal, no bootstrap). Same recursion as verl's
    `compute_gae_advantage_return`, without its whitening (see `lmpo.masked.masked_whiten`).
    Both outputs are 0 off-mask; returns = A + V on valid tokens.

    `bootstrap` [B]: V_next after each row's last valid token instead of 0 (a truncated
    row's return continues with the critic's estimate; 0 keeps a row terminal).
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"gae expects rewards, values and mask of one [B, T] shape, got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}"
        )
    m = mask.to(values.dtype)
    keep = mask.bool()  # where, not a product: an inf in padding must not become NaN
    rewards = torch.where(keep, rewards.detach(), torch.zeros_like(rewards))
    values = torch.where(keep, values.detach(), torch.zeros_like(values))
    next_value = torch.zeros_like(values[:, 0]) if bootstrap is None else \
        bootstrap.detach().to(values.dtype).clone()
    if next_value.shape != values[:, 0].shape:
        raise ValueError(f"gae's bootstrap must be [B] = {tuple(values[:, 0].shape)}, got "
                         f"{tuple(next_value.shape)}")
    next_adv = torch.zeros_like(values[:, 0])
    adv = torch.zeros_like(values)
    for t in range(values.shape[1] - 1, -1, -1):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        a_t = delta + gamma * lam * next_adv
        valid = m[:, t]
        adv[:, t] = a_t * valid
        next_value = values[:, t] * valid + (1 - valid) * next_value
        next_adv = a_t * valid + (1 - valid) * next_adv
    return adv, (adv + values) * m


@ADVANTAGES.register("gae", needs_critic=True, title="GAE (actor-critic PPO)",
                     domains={"gamma": "[0, 1]", "lam": "[0, 1]", "whiten": "bool"},
                     source="arXiv 1506.02438",
                     summary="generalised advantage estimation from a learned critic")
class GAE:
    """The actor-critic family's estimator (registry entry `gae`, `needs_critic=True`):

        adv, returns, metrics = GAE(gamma=1.0, lam=0.95)(rewards, values, mask)

    Token rewards and the critic's values `[B, T]` in (and optionally `bootstrap` [B],
    the value after each row's last token: a truncated row), GAE advantages (whitened over
    the batch's valid tokens when `whiten`) and returns out. Stateless."""

    def __init__(self, *, gamma: float = 1.0, lam: float = 0.95, whiten: bool = True):
        if not 0 <= gamma <= 1 or not 0 <= lam <= 1:
            raise ValueError(f"gae needs gamma and lam in [0, 1], got {gamma}, {lam}")
        self.gamma, self.lam, self.whiten = gamma, lam, whiten

    def __call__(self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
                 bootstrap: torch.Tensor | None = None):
        adv, returns = gae(rewards, values, mask, gamma=self.gamma, lam=self.lam,
                           bootstrap=bootstrap)
        if self.whiten:
            adv = masked_whiten(adv, mask)
        return adv, returns, {"adv/mean": float(masked_mean(adv, mask)),
                              "adv/abs_max": float((adv * mask).abs().max())}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"GAE is stateless; got state keys {sorted(state)}")
