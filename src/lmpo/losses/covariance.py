"""Clip-Cov and KL-Cov (arXiv 2505.22617, "The Entropy Mechanism of RL for Reasoning LMs"):
PPO variants that restrain the few tokens whose log-prob covaries most with the advantage,
the tokens that drive entropy collapse. As verl ships them (`compute_policy_loss_clip_cov`,
`compute_policy_loss_kl_cov`; SkyRL's `clip_cov` / `kl_cov` follow the same code)."""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.ppo import clip_fractions
from lmpo.losses.registry import CLIP, LOSSES, SKYRL_CLIP, VERL_CLIP

VERL_EPS = 1e-8  # verl's masked_mean: sum / (count + 1e-8); kept so selections match


def _masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    return (x * m).sum() / (m.sum() + VERL_EPS)


@LOSSES.register("clip_cov", dual_clip="peer", default_agg="token-mean",
                 clipfrac="cov/selected_frac",  # what the verl adapter reports as pg_clipfrac
                 diagnostics=("loss/cov/selected_frac", "loss/clipfrac"),
                 acts={"metric": "loss/cov/selected_frac", "above": 0.0},
                 engagement="loss/cov/selected_frac",
                 peer_keys={"verl": VERL_CLIP | {"clip_cov_ratio": "policy_loss.clip_cov_ratio",
                                                 "clip_cov_lb": "policy_loss.clip_cov_lb",
                                                 "clip_cov_ub": "policy_loss.clip_cov_ub"},
                            "skyrl": SKYRL_CLIP | {"clip_cov_ratio": "clip_cov.clip_ratio",
                                                   "clip_cov_lb": "clip_cov.clip_cov_lb",
                                                   "clip_cov_ub": "clip_cov.clip_cov_ub"}},
                 domains=CLIP | {"clip_cov_ratio": "(0, 1]", "clip_cov_lb": "real",
                                 "clip_cov_ub": "real"},
                 title="Clip-Cov", source="arXiv 2505.22617",
                 summary="PPO-clip that also drops a random few tokens whose centred "
                         "A x log pi covariance lies in (lb, ub)")
def clip_cov(logp, old_logp, adv, mask, *, eps_low=0.2, eps_high=0.2, clip_cov_ratio=0.0002,
             clip_cov_lb=1.0, clip_cov_ub=5.0):
    """PPO-clip, L = max(-A r, -A clip(r, 1-eps_low, 1+eps_high)), times 0 on the selected
    tokens: with cov_t = (A_t - mean A)(logp_t - mean logp) over valid tokens, the
    candidates are the valid tokens the clip has not already cut (-A clip(r) <= -A r) with
    lb < cov_t < ub; max(1, int(clip_cov_ratio * valid tokens)) of them are drawn
    uniformly at random (torch.randperm on torch's global generator, as verl draws: the
    same seed selects the same tokens). A selected token's loss is multiplied by 0 (as verl
    does): it contributes neither value nor gradient. Diagnostic: the
    selected share of valid tokens (verl's pg_clipfrac for this loss) and PPO's clip
    fractions."""
    x = prepare(logp, old_logp, adv, mask)
    m = x.mask.to(x.rho.dtype)
    loss1 = -x.adv * x.ratio
    loss2 = -x.adv * x.ratio.clamp(1 - eps_low, 1 + eps_high)
    cut = (loss2 > loss1) & x.mask
    lp = x.logp.detach()
    cov = (x.adv - _masked_mean(x.adv, m)) * (lp - _masked_mean(lp, m))
    candidates = torch.nonzero((cov < clip_cov_ub) & (cov > clip_cov_lb) & x.mask & ~cut)
    keep = torch.ones_like(x.rho)
    if len(candidates) > 0:
        count = max(int(clip_cov_ratio * float(m.sum())), 1)
        chosen = candidates[torch.randperm(len(candidates))[:min(count, len(candidates))]]
        keep[chosen[:, 0], chosen[:, 1]] = 0.0
    loss = torch.maximum(loss1, loss2) * keep
    metrics = ratio_metrics(x) | clip_fractions(x, eps_low, eps_high) | {
        **x.shares("cov/selected_frac", (keep == 0).to(m.dtype))}
    return x.zero_off_mask(loss), metrics


@LOSSES.register("kl_cov", default_agg="token-mean",
                 clipfrac="cov/selected_frac",  # what the verl adapter reports as pg_clipfrac
                 diagnostics=("loss/cov/selected_frac",),
                 acts={"metric": "loss/cov/selected_frac", "above": 0.0},
                 engagement="loss/cov/selected_frac", acts_without_advantage=True,
                 peer_keys={"verl": {"kl_cov_ratio": "policy_loss.kl_cov_ratio",
                                     "ppo_kl_coef": "policy_loss.ppo_kl_coef"},
                            "skyrl": {"kl_cov_ratio": "kl_cov.kl_cov_frac",
                                      "ppo_kl_coef": "kl_cov.ppo_kl_coef"}},
                 domains={"kl_cov_ratio": "(0, 1]", "ppo_kl_coef": "[0, inf)"},
                 title="KL-Cov", source="arXiv 2505.22617",
                 summary="unclipped -A r plus a penalty on abs(log-ratio) on the top-k tokens by "
                         "centred A x log pi covariance")
def kl_cov(logp, old_logp, adv, mask, *, kl_cov_ratio=0.0002, ppo_kl_coef=0.1):
    """L = -A r (no clip) on every token, plus ppo_kl_coef * |rho| on the
    max(1, int(kl_cov_ratio * valid tokens)) valid tokens with the largest
    cov_t = (A_t - mean A)(logp_t - mean logp) (means over valid tokens; torch.topk, as
    verl). The penalty acts whatever the advantage (inert at rho = 0). ppo_kl_coef defaults
    to verl's PolicyLossConfig value, 0.1 (the function's own fallback and docstring say 1).
    Diagnostic: the selected share of valid tokens."""
    x = prepare(logp, old_logp, adv, mask)
    loss = -x.adv * x.ratio
    selected = torch.zeros_like(x.mask)
    flat_valid = torch.nonzero(x.mask.reshape(-1), as_tuple=True)[0]
    if len(flat_valid) > 0:
        a = x.adv[x.mask].detach()
        lp = x.logp[x.mask].detach()
        cov = (a - a.mean()) * (lp - lp.mean())
        k = max(1, int(len(cov) * kl_cov_ratio))
        top = flat_valid[torch.topk(cov, k, largest=True).indices]
        selected.view(-1)[top] = True
    loss = torch.where(selected, loss + ppo_kl_coef * x.rho.abs(), loss)
    metrics = ratio_metrics(x) | {**x.shares("cov/selected_frac", selected.to(loss.dtype))}
    return x.zero_off_mask(loss), metrics
