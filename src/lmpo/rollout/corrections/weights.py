"""Importance weights: TIS, sequence TIS, IcePop, MIS and Seq-Mask-TIS."""

from __future__ import annotations

import math

import torch

from lmpo.rollout.corrections.base import (
    CORRECTIONS,
    SAFETY,
    Correction,
    check_band,
    finish,
    mean_normalized,
    seq_sum,
)

IS_DOMAINS = {"upper": "(0, inf)", "batch_normalize": "bool"}
TRUNC_DOMAINS = {"lower": "(0, inf) | None", **IS_DOMAINS}


def truncated(ratio, mask, upper, lower, batch_normalize, *, per_sequence) -> Correction:
    """TIS's weights from the ratios [B, T]: min(r, upper), or with `lower` (TRL's
    clip_min) clamp(r, lower, upper), 0 on padding; then verl's batch normalisation."""
    check_band(lower, upper)
    w = (ratio * mask).clamp(max=upper)
    if lower is not None:
        w = w.clamp(min=lower) * mask
    return finish(mean_normalized(w, mask, per_sequence) if batch_normalize else w, mask)


@CORRECTIONS.register("tis", domains=TRUNC_DOMAINS, ordered=[("lower", "upper")], title="TIS",
                      per_token=True,
                      source="verl rollout_is=token (Yao et al., truncated IS); with lower: "
                             "TRL vllm_importance_sampling_mode token_truncate",
                      summary="token weights min(r_t, upper); with lower, clamp(r_t, lower, "
                              "upper) (two-sided truncation)")
def tis(log_ratio, mask, *, upper: float = 2.0, lower: float | None = None,
        batch_normalize: bool = False) -> Correction:
    return truncated(torch.exp(log_ratio.clamp(-SAFETY, SAFETY)), mask, upper, lower,
                     batch_normalize, per_sequence=False)


@CORRECTIONS.register("seq_tis", domains=TRUNC_DOMAINS, ordered=[("lower", "upper")],
                      title="sequence TIS", source="verl rollout_is=sequence; with lower: TRL "
                                                   "vllm_importance_sampling_mode "
                                                   "sequence_truncate",
                      summary="one weight per response: min(prod_t r_t, upper); with lower, "
                              "clamp(prod_t r_t, lower, upper)")
def seq_tis(log_ratio, mask, *, upper: float = 2.0, lower: float | None = None,
            batch_normalize: bool = False) -> Correction:
    total = seq_sum(log_ratio, mask).clamp(-SAFETY, SAFETY)
    return truncated(torch.exp(total)[:, None].expand_as(log_ratio), mask, upper, lower,
                     batch_normalize, per_sequence=True)


@CORRECTIONS.register("icepop", domains={"lower": "(0, inf)", **IS_DOMAINS}, title="IcePop",
                      per_token=True,
                      ordered=[("lower", "upper")],
                      source="verl rollout_is_threshold='lower_upper' (token level)",
                      summary="token weights r_t inside [lower, upper], 0 outside")
def icepop(log_ratio, mask, *, lower: float = 0.5, upper: float = 5.0,
           batch_normalize: bool = False) -> Correction:
    check_band(lower, upper)
    raw = torch.exp(log_ratio.clamp(-SAFETY, SAFETY)) * mask
    w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    return finish(mean_normalized(w, mask, False) if batch_normalize else w, mask)


@CORRECTIONS.register("mis", domains={"upper": "(0, inf)", "lower": "(0, inf) | None",
                                      "level": "{token, sequence}"},
                      ordered=[("lower", "upper")],
                      per_token=lambda hparams: hparams.get("level", "sequence") == "token",
                      title="MIS", source="TRL vllm_importance_sampling_mode "
                                          "token_mask / sequence_mask (masked IS)",
                      summary="the weight r (per token or per response) where r <= upper, "
                              "0 where it is above")
def mis(log_ratio, mask, *, upper: float = 3.0, lower: float | None = None,
        level: str = "sequence") -> Correction:
    check_band(lower, upper)
    diff = log_ratio * mask
    if level == "sequence":
        diff = diff.sum(-1, keepdim=True)
    r = torch.exp(diff.clamp(-SAFETY, SAFETY))
    out = (r > upper) | (r < (lower if lower is not None else -math.inf))
    w = r.masked_fill(out, 0.0).expand_as(log_ratio) * mask
    return finish(w, mask)


@CORRECTIONS.register("seq_mask_tis", domains={"lower": "(0, inf)", "upper": "(0, inf)"},
                      per_token=True,
                      ordered=[("lower", "upper")],
                      title="Seq-Mask-TIS", source="OpenRLHF vllm_is_correction_type "
                                                   "seq-mask-tis",
                      summary="token weights r_t, responses whose geometric-mean ratio "
                              "leaves [lower, upper] masked out")
def seq_mask_tis(log_ratio, mask, *, lower: float = 0.5, upper: float = 5.0) -> Correction:
    check_band(lower, upper)
    geo = torch.exp(seq_sum(log_ratio, mask) / mask.sum(-1).clamp(min=1))  # OpenRLHF's mean
    keep = ((geo >= lower) & (geo <= upper)).to(log_ratio.dtype)
    w = keep[:, None] * torch.exp(log_ratio.clamp(-SAFETY, SAFETY)) * mask
    return finish(w, mask)
