"""What a response's length does to its training: the soft overlong penalty on its score
(`reward.overlong`) and TRL's `mask_truncated_completions` (`loss.mask_truncated`), and
the share of responses that hit the budget. A run with neither logs nothing new.

- **Overlong penalty** (verl's reward manager with `overlong_buffer`, the soft overlong
  punishment of Yu et al. 2025): with budget L_max (`rollout.max_new_tokens`) and buffer
  L_buf, a response of L tokens (its EOS counted, as verl's valid response length) gets
  min(-(L - (L_max - L_buf)) / L_buf * factor, 0) added to its score: 0 up to L_max -
  L_buf, falling linearly to -factor at the budget.
- **Truncated responses** are those the sampler stopped at the budget (stop reason
  `length`: no EOS). With `loss.mask_truncated` their tokens leave the update's mask (the
  loss and its token counts, as TRL zeroes their completion mask); their scores stay in
  their groups' advantages, as in TRL.
"""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, budget: int, buffer_len: int,
                     factor: float) -> torch.Tensor:
    """[B] verl's overlong penalty for responses of `lengths` tokens (float64)."""
    expected = budget - buffer_len
    exceed = lengths.to(torch.float64) - expected
    return torch.clamp(-exceed / buffer_len * factor, max=0.0)


def truncated(rollout) -> torch.Tensor:
    """[B] bool: the responses stopped at the budget without an EOS."""
    return torch.tensor([r == "length" for r in rollout.stop_reason], dtype=torch.bool)


def active(cfg) -> bool:
    return cfg.reward.overlong.buffer_len > 0 or cfg.loss.mask_truncated


def shape_scores(scored, cfg) -> dict:
    """Add the overlong penalty to `scored.scores` (in place) where `reward.overlong` asks
    for it; the step's length metrics where either option is on."""
    if not active(cfg):
        return {}
    cut = truncated(scored.rollout)
    row = {"rollout/truncated_frac": float(cut.float().mean()) if len(cut) else 0.0}
    ov = cfg.reward.overlong
    if ov.buffer_len > 0:
        pen = overlong_penalty(scored.rollout.lengths, cfg.rollout.max_new_tokens,
                               ov.buffer_len, ov.penalty_factor)
        scored.scores += pen.to(scored.scores.dtype).to(scored.scores.device)
        row |= {"reward/overlong_mean": float(pen.mean()) if len(pen) else 0.0,
                "reward/overlong_frac": float((pen < 0).double().mean()) if len(pen) else 0.0}
    return row


def kept_rows(rollout, cfg) -> torch.Tensor | None:
    """[B] 1.0 for a row the loss keeps under `loss.mask_truncated` (None: the option off)."""
    if not cfg.loss.mask_truncated:
        return None
    return (~truncated(rollout)).float()
