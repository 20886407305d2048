"""GMPO: geometric-mean policy optimisation (arXiv 2507.20673), verl's `geo_mean`."""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.registry import LOSSES, VERL_CLIP

SEQ_EPS = 1e-8  # verl's constant in both row means (sum / (n + 1e-8)); kept to match it


@LOSSES.register("geo_mean", dual_clip="peer", default_agg="seq-mean-token-sum", agg_is_method=True,
                 peer_agg={"verl": "row-mean"},
                 diagnostics=("loss/clipfrac_low", "loss/clipfrac_high"),
                 acts={"metric": "loss/clipfrac", "above": 0.0}, engagement="loss/clipfrac",
                 peer_keys={"verl": VERL_CLIP},
                 domains={"eps_low": "(0, inf)", "eps_high": "(0, inf)"},
                 title="GMPO (geometric-mean policy optimisation)", source="arXiv 2507.20673",
                 summary="the sequence's geometric mean of token ratios, each clipped in "
                         "log space, times the sequence advantage")
def geo_mean(logp, old_logp, adv, mask, *, eps_low=0.2, eps_high=0.2):
    """Per sequence i with n_i tokens (verl's `compute_policy_loss_geo_mean`):

        rho~_t = sign(A_t) * min(sign(A_t) rho_t, sign(A_t) clamp(rho_t, -eps_low, eps_high))
        s_i = exp(sum_t rho~_t / (n_i + 1e-8)),   A_i = sum_t A_t / (n_i + 1e-8)
        L_i = -A_i * s_i

    The clip is on the log-ratio (eps are log-space bounds; GMPO's paper clips at
    (e^-0.4, e^0.4), verl reads its clip_ratio_low/high, 0.2 by default). A token whose
    clamped value is the min contributes no gradient. L_i is spread evenly over the row's
    tokens (L_i / n_i each), so `seq-mean-token-sum` (the default) is the mean of L_i over
    rows with a token. verl hard-codes its aggregation (it ignores loss_agg_mode) as
    torch.mean over every row, an empty row included (its L_i is 0): the two differ by the
    factor (rows with a token) / (all rows) only when a batch holds an empty response.
    verl does not clamp rho before exp; rho is clamped to +-20 here as for every ratio loss.
    Diagnostics: clipfrac_high (A > 0) and clipfrac_low (A < 0), tokens whose rho lies
    outside the bounds, as verl's pg_clipfrac and pg_clipfrac_lower.
    """
    x = prepare(logp, old_logp, adv, mask)
    sign = torch.sign(x.adv)
    clamped = x.rho.clamp(-eps_low, eps_high)
    rho_min = sign * torch.minimum(sign * x.rho, sign * clamped)
    m = x.mask.to(x.rho.dtype)
    n = m.sum(dim=-1)
    s = torch.exp((rho_min * m).sum(dim=-1) / (n + SEQ_EPS))
    a_seq = (x.adv * m).sum(dim=-1) / (n + SEQ_EPS)
    per_token = (-a_seq * s / n.clamp(min=1.0))[:, None].expand_as(x.rho)
    outside = x.rho != clamped
    metrics = ratio_metrics(x) | {
        **x.shares("clipfrac_high", (outside & (x.adv > 0)).to(m.dtype)),
        **x.shares("clipfrac_low", (outside & (x.adv < 0)).to(m.dtype))}
    metrics["clipfrac"] = metrics["clipfrac_high"] + metrics["clipfrac_low"]
    metrics["clipfrac_active"] = metrics["clipfrac_high_active"] + metrics["clipfrac_low_active"]
    return x.zero_off_mask(per_token), metrics
