"""AReaL's M2PO: a second-moment trust region over the batch's log-ratios."""

from __future__ import annotations

import torch

from lmpo.rollout.corrections.base import CORRECTIONS, Correction, finish


@CORRECTIONS.register("m2po", domains={"threshold": "(0, inf)"}, title="M2PO", per_token=True,
                      source="AReaL actor.m2_threshold (areal/trainer/ppo/actor.py; 0.04 in "
                             "its examples/math/gsm8k_m2po.yaml)",
                      summary="masks the tokens with the largest squared log-ratio until "
                              "the rest's mean second moment is below the threshold")
def m2po(log_ratio, mask, *, threshold: float = 0.04) -> Correction:
    """Second-moment trust region over the batch's response tokens (AReaL's
    `_apply_m2po_masking`): sort m2 = log_ratio^2 descending and mask the fewest largest
    tokens after which the mean of the rest is below `threshold` (all but one if none
    is). The batch's tokens are ranked together here (the correction runs once per
    batch: micro-batch invariant); AReaL ranks each micro-batch of its loss call."""
    valid = mask > 0
    m2 = log_ratio.square()[valid]
    keep_flat = torch.ones_like(m2, dtype=torch.bool)
    if m2.numel():
        ordered, order = torch.sort(m2, descending=True)
        counts = torch.arange(m2.numel(), 0, -1, dtype=m2.dtype, device=m2.device)
        below = torch.where(ordered.flip(0).cumsum(0).flip(0) / counts < threshold)[0]
        n_masked = int(below[0]) if below.numel() else m2.numel() - 1
        keep_flat[order[:n_masked]] = False
    keep = torch.zeros_like(valid)
    keep[valid] = keep_flat
    return finish(None, mask, mask * keep.to(mask.dtype))
