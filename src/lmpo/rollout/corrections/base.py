"""What every rollout correction shares: the registry, the `Correction` it returns, verl's
safety bound on log-ratios, and the helpers that turn weights or a rejection mask into the
metrics every kind reports."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmpo.registry import Registry

CORRECTIONS = Registry("rollout correction", defaults={"title": "", "source": "",
                                                       "summary": "", "per_token": False})
# per_token: the kind weighs or masks single tokens by their own ratio (True), or whole
# responses (False); a callable of the hparams where a hyper-parameter decides
SAFETY = 20.0  # verl's SAFETY_BOUND: log-ratios are clamped to +-20 before exp


@dataclass
class Correction:
    weights: torch.Tensor | None  # [B, T] detached, 0 on padding; None = no weights
    mask: torch.Tensor  # [B, T] the update's response mask
    metrics: dict[str, float]


def get_correction(kind: str, **hparams):
    """Correction `kind` with `hparams` bound: `fn(log_ratio, mask) -> Correction`."""
    return CORRECTIONS.get(kind, **hparams)


def list_corrections() -> list[str]:
    return CORRECTIONS.names()


def correction_hparams(kind: str) -> dict:
    return CORRECTIONS.hparams(kind)


def acts_per_token(kind: str, hparams: dict) -> bool:
    """Whether correction `kind` with `hparams` weighs or masks single tokens by their own
    ratio rather than whole responses (what score centering cannot compose with)."""
    flag = CORRECTIONS.meta(kind)["per_token"]
    return bool(flag(hparams) if callable(flag) else flag)


def seq_sum(x, mask):
    return (x * mask).sum(-1)


def seq_mean(x, mask):
    """verl's masked mean per response (its count carries + 1e-8)."""
    return seq_sum(x, mask) / (mask.sum(-1) + 1e-8)


def check_band(lower, upper):
    if lower is not None and upper is not None and lower > upper:
        raise ValueError(f"lower {lower} must be <= upper {upper}")


def finish(weights, mask, new_mask=None) -> Correction:
    """The metrics every kind reports, from its weights and/or its rejection mask."""
    valid = mask > 0
    new_mask = mask if new_mask is None else new_mask
    removed = valid & (new_mask <= 0)
    if weights is not None:
        removed = removed | (valid & (weights == 0))
    metrics = {"rollout_corr/masked_frac": float(removed.sum()) / max(int(valid.sum()), 1),
               "rollout_corr/seq_masked_frac":
                   float(removed.any(-1).sum()) / max(int(valid.any(-1).sum()), 1)}
    shown = weights if weights is not None else new_mask.to(mask.dtype)
    if valid.any():
        w = shown[valid]
        metrics |= {"rollout_corr/weight_mean": float(w.mean()),
                    "rollout_corr/weight_min": float(w.min()),
                    "rollout_corr/weight_max": float(w.max())}
    return Correction(None if weights is None else weights.detach(), new_mask, metrics)


def mean_normalized(weights, mask, per_sequence: bool):
    """verl's rollout_is_batch_normalize: divide by the mean weight (over tokens, or over
    sequences for a per-sequence weight), unless that mean is <= 1e-8."""
    if per_sequence:
        seq = seq_mean(weights, mask)
        present = (mask.sum(-1) > 0).to(weights.dtype)
        mean = (seq * present).sum() / present.sum().clamp(min=1e-8)
    else:
        mean = seq_sum(weights, mask).sum() / (mask.sum() + 1e-8)
    return weights / mean if mean > 1e-8 else weights
