"""The critic's loss (actor-critic family: PPO-clip, PPO-OR, ESPO)."""

from __future__ import annotations

import torch


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
               mask: torch.Tensor, *, clip: float | None = None):
    """PPO's (optionally clipped) squared value error per token.  # [B, T] x4 -> [B, T], dict

        L = 0.5 * (V - R)^2                                           (clip None)
        L = 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)   (clip c)

    as verl's `compute_value_loss` and OpenRLHF's clipped value loss; exactly 0
    where `mask` is 0. Metrics: `value/clipfrac` (share of valid tokens where the
    clipped term is the larger one).
    """
    if not (values.shape == old_values.shape == returns.shape == mask.shape):
        raise ValueError(f"value_loss expects equal shapes, got {tuple(values.shape)}, "
                         f"{tuple(old_values.shape)}, {tuple(returns.shape)}, "
                         f"{tuple(mask.shape)}")
    if clip is not None and clip <= 0:
        raise ValueError(f"value clip must be > 0 or None, got {clip}")
    valid = mask.bool()
    old_values, returns = old_values.detach(), returns.detach()
    err = (values - returns).square()
    clipped_frac = 0.0
    if clip is not None:
        v_clip = old_values + (values - old_values).clamp(-clip, clip)
        err_clip = (v_clip - returns).square()
        took = (err_clip > err) & valid
        err = torch.maximum(err, err_clip)
        clipped_frac = float(took.sum()) / max(int(valid.sum()), 1)
    loss = torch.where(valid, 0.5 * err, torch.zeros_like(err))
    return loss, {"value/clipfrac": clipped_frac}
