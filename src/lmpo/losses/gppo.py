"""CE-GPPO: gradient-preserving clipping, arXiv 2509.20712."""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.registry import CLIP, DUAL_CLIP, LOSSES, TRL_CLIP, VERL_CLIP


@LOSSES.register("cegppo", dual_clip="offered", default_agg="token-mean",
                 diagnostics=("loss/clipfrac_low", "loss/clipfrac_high",
                              "loss/cegppo/beta_grad_frac"),
                 acts={"metric": "loss/clipfrac", "above": 0.0},
                 engagement="loss/cegppo/beta_grad_frac",
                 twin={"loss": {"name": "cegppo", "hparams": {"beta1": 0.0, "beta2": 0.0}}},
                 readings=("loss/cegppo/beta_grad_frac",),
                 peer_keys={"verl": VERL_CLIP, "trl": TRL_CLIP},
                 domains=CLIP | DUAL_CLIP | {"beta1": "[0, inf)", "beta2": "[0, inf)"},
                 title="CE-GPPO", source="arXiv 2509.20712",
                 summary="PPO-clip's value, but clipped tokens keep a beta-scaled gradient "
                         "beta(1±eps)A to steer entropy")
def cegppo(logp, old_logp, adv, mask, *, eps_low=0.2, eps_high=0.2, beta1=0.5, beta2=1.0,
           clip_ratio_c=None):
    """PPO-clip whose clipped tokens keep a bounded, beta-scaled gradient.

        r < 1-eps_low and A < 0  (NA&LP): L = -beta1 (1-eps_low) r/sg(r) A
        r > 1+eps_high and A > 0 (PA&LP): L = -beta2 (1+eps_high) r/sg(r) A
        otherwise:                        L = -r A

    r/sg(r) is 1 in value with d/dlogp = 1, so the clipped regions have value
    -beta(1±eps)A and gradient -beta(1±eps)A per unit dlogp (PPO-clip: 0).
    Optional dual clip: for A < 0 and r > clip_ratio_c, L = -clip_ratio_c A (no gradient).
    """
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual clip), got {clip_ratio_c}")
    x = prepare(logp, old_logp, adv, mask)
    unit = x.ratio / x.ratio.detach()  # value 1, gradient 1 w.r.t. logp
    low = (x.ratio < 1 - eps_low) & (x.adv < 0)
    high = (x.ratio > 1 + eps_high) & (x.adv > 0)
    loss = -x.ratio * x.adv
    loss = torch.where(low, -beta1 * (1 - eps_low) * unit * x.adv, loss)
    loss = torch.where(high, -beta2 * (1 + eps_high) * unit * x.adv, loss)
    lowf, highf = low.to(loss.dtype), high.to(loss.dtype)
    metrics = ratio_metrics(x) | {
        **x.shares("clipfrac", lowf + highf),
        **x.shares("clipfrac_low", lowf),
        **x.shares("clipfrac_high", highf),
    }
    dual = torch.zeros_like(low)
    if clip_ratio_c is not None:
        dual = (x.adv < 0) & (x.ratio > clip_ratio_c)
        loss = torch.where(dual, -clip_ratio_c * x.adv, loss)
        metrics["clipfrac_dual"] = x.mean(dual.to(loss.dtype))
    metrics["cegppo/beta_grad_frac"] = beta_grad_share(x, low, high, dual, beta1 * (1 - eps_low),
                                                       beta2 * (1 + eps_high))
    return x.zero_off_mask(loss), metrics


def beta_grad_share(x, low, high, dual, w_low: float, w_high: float) -> float:
    """Share of the per-token loss gradient's mass, sum over valid tokens of |dL/dlogp|,
    carried by the two beta regions: |dL/dlogp| is w_low |A| there (NA&LP), w_high |A|
    (PA&LP), |r A| elsewhere, 0 where the dual clip holds. 0 on an empty mask."""
    a, r = x.adv.detach().abs(), x.ratio.detach()
    mass = torch.where(low, w_low * a, torch.where(high, w_high * a, r * a))
    mass = torch.where(dual | ~x.mask, torch.zeros_like(mass), mass)
    total = mass.sum()
    beta = mass[(low | high) & ~dual].sum()
    return float(beta / total) if float(total) > 0 else 0.0
