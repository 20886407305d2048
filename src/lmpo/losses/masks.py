"""Token masks that apply to any policy loss, set outside `loss.hparams` (`loss.*` keys).

`off_policy_sequence_mask`: DeepSeek-V3.2's off-policy sequence masking (OPSM, its technical
report's Eq. 9), TRL's `off_policy_mask_threshold` and slime's `--use-opsm`: a response
whose tokens moved, on average, more than `threshold` in KL(pi_sampler || pi) is left out
of the loss where its advantage is negative (it would push down what the current policy
no longer samples); tokens with A >= 0 always stay.
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
