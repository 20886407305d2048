"""Probability-change trust regions: DPPO (hard mask, arXiv 2602.04879) and
DRPO (smooth quadratic, arXiv 2606.09821).

Both measure a step by the sampled token's probability change p - q, with
p = exp(logp) and q = exp(old_logp), instead of by the ratio.
"""

from __future__ import annotations

import torch

from lmpo.losses.base import LossInputs, prepare, ratio_metrics
from lmpo.losses.registry import LOSSES

DEVIATED = 0.1  # |w - 1| beyond which DRPO's weight counts as engaged (docs/reproductions.md)


def _truncated_pg(x: LossInputs, keep: torch.Tensor, clip_ratio_c: float):
    """DPPO's loss on kept tokens: -A * sg(min(r, c)) * logp, exactly 0 on dropped ones."""
    keep = keep.detach()
    weight = x.ratio.clamp(max=clip_ratio_c).detach()
    loss = torch.where(keep, -x.adv * weight * x.logp, torch.zeros_like(x.logp))
    dropped = (~keep).to(x.logp.dtype)
    metrics = ratio_metrics(x) | {
        **x.shares("dppo/masked_frac", dropped),
        "dppo/truncated_frac": x.mean(((x.ratio > clip_ratio_c) & keep).to(x.logp.dtype)),
    }
    return x.zero_off_mask(loss), metrics


# verl reads DPPO's thresholds from its clip knobs (clip_ratio as the fallback)
DPPO_VERL = {"delta_low": ("clip_ratio_low", "clip_ratio"),
             "delta_high": ("clip_ratio_high", "clip_ratio"), "clip_ratio_c": ("clip_ratio_c",)}


def tv_dropped(x: LossInputs, delta_low: float, delta_high: float) -> torch.Tensor:
    """DPPO's binary-TV mask: True where the token moved with its advantage past the
    threshold, p - q > delta_high for A > 0 or p - q < -delta_low for A <= 0."""
    p, q = _probs(x)
    return torch.where(x.adv > 0, (p - q) > delta_high, (p - q) < -delta_low)


def _probs(x: LossInputs):
    return torch.exp(x.logp.detach()), torch.exp(x.old_logp)


DPPO_META = {"diagnostics": ("loss/dppo/masked_frac",), "clipfrac": "dppo/masked_frac",
             "acts": {"metric": "loss/dppo/masked_frac", "above": 0.0},
             "engagement": "loss/dppo/masked_frac", "source": "arXiv 2602.04879"}


@LOSSES.register("dppo_tv", default_agg="token-mean", **DPPO_META,
                 domains={"delta_low": "(0, 1]", "delta_high": "(0, 1]",
                          "clip_ratio_c": "(1, inf)"},
                 peer_keys={"verl": DPPO_VERL}, title="DPPO (binary TV)",
                 summary="hard mask on the sampled token's probability change (TV)")
def dppo_tv(logp, old_logp, adv, mask, *, delta_low=0.15, delta_high=0.15, clip_ratio_c=3.0):
    """DPPO binary-TV: drop a token if A > 0 and p - q > delta_high, or A <= 0 and
    p - q < -delta_low; keep -A * sg(min(r, c)) * logp on the rest (as verl's dppo_tv)."""
    x = prepare(logp, old_logp, adv, mask)
    return _truncated_pg(x, ~tv_dropped(x, delta_low, delta_high), clip_ratio_c)


@LOSSES.register("dppo_kl", default_agg="token-mean", **DPPO_META, title="DPPO (binary KL)",
                 domains={"delta": "(0, inf)", "clip_ratio_c": "(1, inf)",
                          "delta_low": "(0, inf) | None", "delta_high": "(0, inf) | None"},
                 peer_keys={"verl": DPPO_VERL},
                 summary="hard mask on the sampled token's probability change (binary KL)")
def dppo_kl(logp, old_logp, adv, mask, *, delta=0.05, clip_ratio_c=3.0, delta_low=None,
            delta_high=None):
    """DPPO binary-KL: D = q log(q/p) + (1-q) log((1-q)/(1-p)); drop a token if
    D > delta and it moved with its advantage (A > 0 and p > q, or A <= 0 and p < q).
    `delta_high` (A > 0) and `delta_low` (A <= 0), when set, replace `delta` on their side,
    as verl's dppo_kl reads clip_ratio_high / clip_ratio_low.

    The 1e-8 guards inside the second log are verl's; (1-p) is floored at 0 so a
    log-prob that rounds above 0 cannot produce NaN.
    """
    x = prepare(logp, old_logp, adv, mask)
    p, q = _probs(x)
    d = q * (x.old_logp - x.logp.detach()) + (1 - q) * torch.log(
        ((1 - q).clamp(min=0) + 1e-8) / ((1 - p).clamp(min=0) + 1e-8)
    )
    high = delta if delta_high is None else delta_high
    low = delta if delta_low is None else delta_low
    keep = torch.where(x.adv > 0, (d <= high) | (p <= q), (d <= low) | (p >= q))
    loss, metrics = _truncated_pg(x, keep, clip_ratio_c)
    metrics["dppo/binary_kl_mean"] = x.mean(d)
    return loss, metrics


def gradient_share(part: torch.Tensor, whole: torch.Tensor, mask: torch.Tensor) -> float:
    """||part|| / ||whole|| over the valid tokens (0 where `whole` is all zero)."""
    norm = float(whole[mask].norm())
    return float(part[mask].norm()) / norm if norm > 0 else 0.0


@LOSSES.register("drpo", default_agg="seq-mean-token-sum-norm",
                 diagnostics=("loss/drpo/weight_min", "loss/drpo/weight_max",
                              "loss/drpo/deviated_frac", "loss/drpo/weight_dev_mean",
                              "loss/drpo/weight_dev_max", "loss/drpo/penalty_share"),
                 twin={"loss": {"name": "importance_sampling"}},
                 readings=("loss/drpo/weight_dev_mean", "loss/drpo/weight_dev_max",
                           "loss/drpo/penalty_share"),
                 acts={"metric": "loss/drpo/weight_dev_max", "above": 1e-3},
                 engagement="loss/drpo/deviated_frac",
                 domains={"delta": "[1e-6, inf)"},  # smaller: the penalty overflows float32
                 title="DRPO", source="arXiv 2606.09821",
                 summary="smooth advantage-weighted quadratic penalty on the sampled token's "
                         "probability change")
def drpo(logp, old_logp, adv, mask, *, delta=12.5):
    """DRPO: L = -r A + |A| q (r - 1)^2 / (2 delta)  (= -rA + |A| (p-q)^2 / (2 delta q)).

    Gradient w.r.t. logp is plain PG's -rA times w = 1 - sign(A(r-1)) |p-q| / delta:
    1 at the anchor, 0 at |p-q| = delta when moving with A, corrective beyond. Since
    |p - q| <= 1, |w - 1| <= 1 / delta: at the published delta 12.5 a token's weight moves
    at most 0.08 from 1. Its readings: the mean and largest |w - 1| over valid tokens, and
    `penalty_share`, the norm of the penalty's per-token gradient |A| q (r - 1) r / delta
    over that of the plain PG's, r A (per token, before aggregation).
    """
    if delta <= 0:
        raise ValueError(f"drpo delta must be > 0, got {delta}")
    x = prepare(logp, old_logp, adv, mask)
    q = torch.exp(x.old_logp)
    penalty = x.adv.abs() * q * (x.ratio - 1).square() / (2 * delta)
    loss = -x.ratio * x.adv + penalty
    moved = (q * (x.ratio - 1)).detach()  # p - q (with the clamped ratio)
    w = 1 - torch.sign(x.adv * moved) * moved.abs() / delta
    any_valid = bool(x.mask.any())
    dev = (w - 1).abs()
    metrics = ratio_metrics(x) | {
        "drpo/weight_min": float(w[x.mask].min()) if any_valid else 1.0,
        "drpo/weight_max": float(w[x.mask].max()) if any_valid else 1.0,
        "drpo/weight_dev_max": float(dev[x.mask].max()) if any_valid else 0.0,
        **x.shares("drpo/deviated_frac", (dev > DEVIATED).to(w.dtype)),
        "drpo/penalty_mean": x.mean(penalty.detach()),
        "drpo/weight_dev_mean": x.mean(dev),
        "drpo/penalty_share": gradient_share(
            (x.adv.abs() * q * (x.ratio - 1) * x.ratio / delta).detach(),
            (x.ratio * x.adv).detach(), x.mask),
    }
    return x.zero_off_mask(loss), metrics


@LOSSES.register("spo", default_agg="seq-mean-token-sum-norm",
                 domains={"eps": "[1e-6, inf)"},  # smaller: the penalty overflows float32
                 title="SPO (Simple Policy Optimization)",
                 source="arXiv 2401.16025; UniRL drpo.py with penalty_mu_weighted=False",
                 summary="-r A plus abs(A) (r - 1)^2 / (2 eps): DRPO's penalty without the "
                         "old probability's weight (its ablation)")
def spo(logp, old_logp, adv, mask, *, eps=0.2):
    """SPO: L = -r A + |A| (r - 1)^2 / (2 eps), r = pi / pi_old: DRPO's quadratic penalty
    on the ratio rather than on the probability change (DRPO's q = pi_old weight dropped,
    UniRL's `penalty_mu_weighted: False`). dL/dlogp = -A r + |A| (r - 1) r / eps: the
    plain PG weight, driven to 0 where r has moved eps in A's direction."""
    x = prepare(logp, old_logp, adv, mask)
    penalty = x.adv.abs() * (x.ratio - 1).square() / (2 * eps)
    return x.zero_off_mask(-x.ratio * x.adv + penalty), ratio_metrics(x) | {
        "spo/penalty_mean": x.mean(penalty.detach())}

