"""Generalised advantage estimation over right-padded (or holed) responses."""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, *, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) per token.  # [B, T] x3 -> adv [B, T], returns [B, T]

    delta_t = r_t + gamma * V_next - V_t, A_t = delta_t + gamma * lam * A_next, where
    "next" is the next *valid* position of the same row: masked positions are
    skipped (their rewards and values never enter), and after a row's last valid
    token V_next = A_next = 0 (terminal, no bootstrap). Same recursion as verl's
    `compute_gae_advantage_return`, without its whitening (see `lmpo.masked.masked_whiten`).
    Both outputs are 0 off-mask; returns = A + V on valid tokens.
    """
    if not (rewards.shape == values.shape == mask.shape) or rewards.dim() != 2:
        raise ValueError(
            f"gae expects rewards, values and mask of one [B, T] shape, got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}"
        )
    m = mask.to(values.dtype)
    rewards, values = rewards.detach() * m, values.detach() * m
    next_value = torch.zeros_like(values[:, 0])
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
