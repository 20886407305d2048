"""Rollout corrections (`rollout.correction: {kind, hparams}`): importance weights and
rejection masks for the mismatch between the policy that sampled and the float32 policy
the update starts from, applicable to any loss.

Every kind reads one quantity, the log-ratio of the float32 recompute to the behaviour
log-probs, `log_ratio = log pi_train - log pi_rollout` [B, T] (the correction runs that
recompute itself, whatever `rollout.old_logp` says), and returns a `Correction`:

- `weights` [B, T] (or None): multiply each token's loss before aggregation, as verl
  multiplies its policy losses by `rollout_is_weights`;
- `mask` [B, T]: the response mask the update uses (verl's rejection sampling rewrites
  `response_mask`: rejected tokens leave the loss and its token counts);
- `metrics`: `rollout_corr/weight_mean|_min|_max` (over the response tokens), the share
  of tokens the correction removes (`masked_frac`: weight 0 or rejected) and the share of
  responses it touches so (`seq_masked_frac`).

Kinds, each equal to its source's code (tests/test_corrections.py, and against verl 0.9.1
itself in tests/test_verl.py):

| kind | weight | source |
|---|---|---|
| tis | min(r_t, upper) | verl `rollout_is: token` (TIS) |
| seq_tis | min(prod_t r_t, upper), per sequence | verl `rollout_is: sequence` |
| icepop | r_t where lower <= r_t <= upper, else 0 | verl `rollout_is_threshold: lower_upper` |
| mis | r where r <= upper (and >= lower), else 0; per token or sequence | TRL `*_mask` |
| seq_mask_tis | r_t * 1[lower <= exp(mean_t log r_t) <= upper] | OpenRLHF `seq-mask-tis` |
| rs_<mode> | none: a rejection mask (verl's `rollout_rs` mode) | verl `rollout_rs` |
| m2po | none: masks the largest squared log-ratios (rest's mean < threshold) | AReaL |

r_t = exp(clamp(log_ratio_t, -20, 20)) (verl's safety bound, applied to every kind).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lmpo.registry import Registry

CORRECTIONS = Registry("rollout correction", defaults={"title": "", "source": "",
                                                       "summary": ""})
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


# ---------------------------------------------------------------- helpers
def _seq_sum(x, mask):
    return (x * mask).sum(-1)


def _seq_mean(x, mask):
    """verl's masked mean per response (its count carries + 1e-8)."""
    return _seq_sum(x, mask) / (mask.sum(-1) + 1e-8)


def _check_band(lower, upper):
    if lower is not None and lower > upper:
        raise ValueError(f"lower {lower} must be <= upper {upper}")


def _finish(weights, mask, new_mask=None) -> Correction:
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


def _batch_normalize(weights, mask, per_sequence: bool):
    """verl's rollout_is_batch_normalize: divide by the mean weight (over tokens, or over
    sequences for a per-sequence weight), unless that mean is <= 1e-8."""
    if per_sequence:
        seq = _seq_mean(weights, mask)
        present = (mask.sum(-1) > 0).to(weights.dtype)
        mean = (seq * present).sum() / present.sum().clamp(min=1e-8)
    else:
        mean = _seq_sum(weights, mask).sum() / (mask.sum() + 1e-8)
    return weights / mean if mean > 1e-8 else weights


# ---------------------------------------------------------------- importance weights
IS_DOMAINS = {"upper": "(0, inf)", "batch_normalize": "bool"}


@CORRECTIONS.register("tis", domains=IS_DOMAINS, title="TIS",
                      source="verl rollout_is=token (Yao et al., truncated IS)",
                      summary="token weights min(r_t, upper)")
def tis(log_ratio, mask, *, upper: float = 2.0, batch_normalize: bool = False) -> Correction:
    w = (torch.exp(log_ratio.clamp(-SAFETY, SAFETY)) * mask).clamp(max=upper)
    return _finish(_batch_normalize(w, mask, False) if batch_normalize else w, mask)


@CORRECTIONS.register("seq_tis", domains=IS_DOMAINS, title="sequence TIS",
                      source="verl rollout_is=sequence",
                      summary="one weight per response: min(prod_t r_t, upper)")
def seq_tis(log_ratio, mask, *, upper: float = 2.0, batch_normalize: bool = False
            ) -> Correction:
    total = _seq_sum(log_ratio, mask).clamp(-SAFETY, SAFETY)
    w = (torch.exp(total)[:, None].expand_as(log_ratio) * mask).clamp(max=upper)
    return _finish(_batch_normalize(w, mask, True) if batch_normalize else w, mask)


@CORRECTIONS.register("icepop", domains={"lower": "(0, inf)", **IS_DOMAINS}, title="IcePop",
                      source="verl rollout_is_threshold='lower_upper' (token level)",
                      summary="token weights r_t inside [lower, upper], 0 outside")
def icepop(log_ratio, mask, *, lower: float = 0.5, upper: float = 5.0,
           batch_normalize: bool = False) -> Correction:
    _check_band(lower, upper)
    raw = torch.exp(log_ratio.clamp(-SAFETY, SAFETY)) * mask
    w = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    return _finish(_batch_normalize(w, mask, False) if batch_normalize else w, mask)


@CORRECTIONS.register("mis", domains={"upper": "(0, inf)", "lower": "(0, inf) | None",
                                      "level": "{token, sequence}"},
                      title="MIS", source="TRL vllm_importance_sampling_mode "
                                          "token_mask / sequence_mask (masked IS)",
                      summary="the weight r (per token or per response) where r <= upper, "
                              "0 where it is above")
def mis(log_ratio, mask, *, upper: float = 3.0, lower: float | None = None,
        level: str = "sequence") -> Correction:
    _check_band(lower, upper)
    diff = log_ratio * mask
    if level == "sequence":
        diff = diff.sum(-1, keepdim=True)
    r = torch.exp(diff.clamp(-SAFETY, SAFETY))
    out = (r > upper) | (r < (lower if lower is not None else -math.inf))
    w = r.masked_fill(out, 0.0).expand_as(log_ratio) * mask
    return _finish(w, mask)


@CORRECTIONS.register("seq_mask_tis", domains={"lower": "(0, inf)", "upper": "(0, inf)"},
                      title="Seq-Mask-TIS", source="OpenRLHF vllm_is_correction_type "
                                                   "seq-mask-tis",
                      summary="token weights r_t, responses whose geometric-mean ratio "
                              "leaves [lower, upper] masked out")
def seq_mask_tis(log_ratio, mask, *, lower: float = 0.5, upper: float = 5.0) -> Correction:
    _check_band(lower, upper)
    geo = torch.exp(_seq_sum(log_ratio, mask) / mask.sum(-1).clamp(min=1))  # OpenRLHF's mean
    keep = ((geo >= lower) & (geo <= upper)).to(log_ratio.dtype)
    w = keep[:, None] * torch.exp(log_ratio.clamp(-SAFETY, SAFETY)) * mask
    return _finish(w, mask)


@CORRECTIONS.register("m2po", domains={"threshold": "(0, inf)"}, title="M2PO",
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
    return _finish(None, mask, mask * keep.to(mask.dtype))


# ---------------------------------------------------------------- verl's rejection modes
RS_MODES = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
            "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
# defaults where verl has none: its presets' thresholds (decoupled_seq_is_rs 0.5_2.0,
# decoupled_geo_rs 0.999_1.001, decoupled_k3_rs 0.01)
RS_DEFAULT = {"k1": (0.5, 2.0), "seq_mean_k1": (0.999, 1.001), "k2": (None, 0.01),
              "k3": (None, 0.01)}


def _divergence(log_ratio, estimator: str):
    lr = log_ratio.clamp(-SAFETY, SAFETY)
    return {"k1": -lr, "k2": 0.5 * lr ** 2, "k3": torch.exp(lr) - 1.0 - lr}[estimator]


def _seq_max(x, mask):
    m = x.masked_fill(mask <= 0, -math.inf).amax(-1)
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)


def rejection(mode: str, log_ratio, mask, lower, upper) -> Correction:
    """verl's `compute_rollout_rejection_mask` for one mode: k1 statistics (log pi_rollout /
    pi_train) must lie in [log lower, log upper], k2/k3 statistics be <= upper; sequence
    modes reject the whole response."""
    level, est = mode.rsplit("_", 1)
    stat = _divergence(log_ratio, est)
    if level != "token":
        reduce = {"seq_sum": _seq_sum, "seq_mean": _seq_mean, "seq_max": _seq_max}[level]
        stat = reduce(stat, mask)[:, None].expand_as(log_ratio)
    if est == "k1":
        keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
    else:
        keep = stat <= upper
    return _finish(None, mask, mask * keep.to(mask.dtype))


def _register_rs(mode: str) -> None:
    est = mode.rsplit("_", 1)[1]
    lower_default, upper_default = RS_DEFAULT.get(mode, RS_DEFAULT[est])
    if est == "k1":
        def fn(log_ratio, mask, *, lower: float | None = lower_default,
               upper: float = upper_default) -> Correction:
            lower = 1.0 / upper if lower is None else lower  # verl: a single value is upper
            _check_band(lower, upper)
            return rejection(mode, log_ratio, mask, lower, upper)
        domains = {"lower": "(0, inf) | None", "upper": "(0, inf)"}
    else:
        def fn(log_ratio, mask, *, upper: float = upper_default) -> Correction:
            return rejection(mode, log_ratio, mask, None, upper)
        domains = {"upper": "(0, inf)"}
    fn.__name__ = f"rs_{mode}"
    CORRECTIONS.register(f"rs_{mode}", domains=domains, family="rs_<mode>",
                         title="rejection sampling", source="verl rollout_rs",
                         summary="masks tokens or responses whose divergence estimate "
                                 "(k1 in a ratio band, k2/k3 below a bound; per token, or "
                                 "a response's sum, mean or max) leaves the threshold: "
                                 + ", ".join(RS_MODES))(fn)


for _mode in RS_MODES:
    _register_rs(_mode)
