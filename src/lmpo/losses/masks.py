"""Token masks that apply to any policy loss, set outside `loss.hparams` (`loss.*` keys).

`off_policy_sequence_mask`: DeepSeek-V3.2's off-policy sequence masking (OPSM, its technical
report's Eq. 9), TRL's `off_policy_mask_threshold` and slime's `--use-opsm`: a response
whose tokens moved, on average, more than `threshold` in KL(pi_sampler || pi) is left out
of the loss where its advantage is negative (it would push down what the current policy
no longer samples); tokens with A >= 0 always stay.

`sequence_divergence_mask`: VACO's sequence mask (arXiv 2603.01365, as open-instruct
implements it: PR #1681, generalised in #1755 as `rho_divergence_algo: vaco`): a response
whose mean per-token *binary* divergence between the anchor pi_old and the sampler mu
exceeds `delta` leaves the loss, token by token where the token moved away from the
sampler in its advantage's direction (directional, the PR's default) or whole.
"""

from __future__ import annotations

import torch


def off_policy_sequence_mask(logp, sampler_logp, adv, mask, threshold: float):
    """(keep [B, T] in logp's dtype, metrics), as TRL's `get_off_policy_mask`:

        KL_i = sum_t (log pi_sampler - log pi)_t m_t / max(sum_t m_t, 1)   (pi detached)
        keep_t = A_t >= 0  or  KL_i <= threshold

    A NaN sampler log-prob counts as 0 (TRL: a token the sampler could not score gives no
    evidence). `adv` is [B] or [B, T]; `keep` is 1 off the mask (the loss is 0 there).
    Metrics: the share of valid tokens masked (`opsm/masked_frac`) and the mean KL_i over
    responses with a token (`opsm/seq_kl_mean`)."""
    m = mask.to(logp.dtype)
    kl = torch.nan_to_num(sampler_logp.detach().to(logp.dtype) - logp.detach(), nan=0.0)
    seq_kl = (kl * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    adv = adv[:, None] if adv.dim() == 1 else adv
    keep = ((adv >= 0) | (seq_kl <= threshold)).to(logp.dtype).expand_as(logp)
    valid = mask.bool()
    rows = valid.any(-1)
    metrics = {"opsm/masked_frac": float((valid & (keep == 0)).sum()) / max(int(valid.sum()), 1),
               "opsm/seq_kl_mean": float(seq_kl[rows].mean()) if rows.any() else 0.0}
    return keep, metrics


DIVERGENCES = ("tv", "kl")


def binary_divergence(old_logp, sampler_logp, kind: str = "tv"):
    """Per token, in float64: the divergence between two Bernoullis over {the sampled
    token, every other}, with p = pi_old(y_t), q = mu(y_t) (each clamped into [eps, 1 -
    eps]): TV |q - p|, or KL(mu || pi_old) = q log(q / p) + (1 - q) log((1 - q) / (1 - p))
    (at least 0). DPPO's Eqs. 13/14; a lower bound on the full distributions' divergence
    that needs no pass over the vocabulary."""
    if kind not in DIVERGENCES:
        raise ValueError(f"unknown binary divergence {kind!r}; valid: {', '.join(DIVERGENCES)}")
    eps = torch.finfo(torch.float64).eps
    p = old_logp.detach().double().clamp(max=0.0).exp().clamp(eps, 1 - eps)
    q = sampler_logp.detach().double().clamp(max=0.0).exp().clamp(eps, 1 - eps)
    if kind == "tv":
        return (q - p).abs()
    return (q * (q.log() - p.log()) + (1 - q) * (torch.log1p(-q) - torch.log1p(-p))).clamp(min=0)


def sequence_divergence_mask(old_logp, sampler_logp, adv, mask, delta: float,
                             kind: str = "tv", directional: bool = True):
    """(keep [B, T] in old_logp's dtype, metrics): VACO's mask.

        D_i = sum_t d_t m_t / max(sum_t m_t, 1),  d_t = binary_divergence(pi_old, mu)_t
        drop_t = D_i > delta  and (not directional or sign(log pi_old - log mu)_t A_t > 0)

    Directional: inside a divergent response only the tokens whose update would move the
    policy further from the sampler (pi_old above mu and A > 0, or below and A < 0) leave
    the loss; A = 0 or pi_old = mu keeps a token. `adv` is [B] or [B, T]; `keep` is 1 off
    the mask. Metrics: the share of valid tokens masked (`seq_divergence/masked_frac`), of responses
    over delta (`seq_divergence/seq_over_frac`), and the mean D_i
    (`seq_divergence/seq_div_mean`)."""
    m = mask.double()
    d = binary_divergence(old_logp, sampler_logp, kind) * m
    seq = d.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    over = seq > delta
    adv = adv[:, None] if adv.dim() == 1 else adv
    drop = over.expand_as(d)
    if directional:
        away = torch.sign(old_logp.detach().double() - sampler_logp.detach().double()) \
            * adv.detach().double() > 0
        drop = drop & away
    valid = mask.bool()
    drop = drop & valid
    rows = valid.any(-1)
    some = bool(rows.any())
    metrics = {"seq_divergence/masked_frac": float(drop.sum()) / max(int(valid.sum()), 1),
               "seq_divergence/seq_over_frac":
                   float(over[:, 0][rows].double().mean()) if some else 0.0,
               "seq_divergence/seq_div_mean": float(seq[:, 0][rows].mean()) if some else 0.0}
    return (~drop).to(old_logp.dtype), metrics
