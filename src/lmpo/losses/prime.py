"""prime-rl's two built-in losses: its default (DPPO binary-TV masking plus Kimi K2.5's
squared log-ratio KL) and `ipo` (a symmetric probability-change mask), as
`prime_rl/trainer/rl/loss.py` (`default_loss_fn`, `ipo_loss_fn`, prime-rl 2026-08) writes
them. prime-rl is not on the package registry: they are checked against that published
code's formula (tests/loss_references/prime.py).

Both anchor the ratio at the sampler's log-probs (`inference_logprobs`; lmpo's old_logp)
and keep the ratio itself, not a stop-gradient weight, in the policy term:
    L_t = -keep_t * adv_tau * A_t * r_t + kl_tau * (log r_t)^2
The KL term acts on every response token, masked or not. prime-rl sums each sample's
tokens and divides by the global token count: lmpo's token-mean.
"""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.divergence import tv_dropped
from lmpo.losses.registry import LOSSES

SOURCE = "prime-rl trainer/rl/loss.py; arXiv 2602.04879 (DPPO), 2602.02276 (Kimi K2.5)"
TAUS = {"adv_tau": "[0, inf)", "kl_tau": "[0, inf)"}


def _masked_pg_with_kl(x, dropped, adv_tau, kl_tau):
    keep = (~dropped).detach()
    pg = torch.where(keep, adv_tau * x.adv * x.ratio, torch.zeros_like(x.ratio))
    loss = -pg + kl_tau * x.rho.square()
    metrics = ratio_metrics(x) | {**x.shares("prime/masked_frac", dropped.to(x.rho.dtype)),
                                  "prime/log_ratio_sq_mean": x.mean(x.rho.square())}
    return x.zero_off_mask(loss), metrics


@LOSSES.register("dppo_tv_kl", default_agg="token-mean", acts_without_advantage=True,
                 diagnostics=("loss/prime/masked_frac",), engagement="loss/prime/masked_frac",
                 clipfrac="prime/masked_frac",
                 domains={"delta_low": "[0, inf)", "delta_high": "[0, inf)"} | TAUS,
                 title="DPPO-TV + squared log-ratio KL (prime-rl's default)", source=SOURCE,
                 summary="DPPO's binary-TV mask on r A (ratio kept, no truncation) plus "
                         "kl_tau (log r)^2 on every token")
def dppo_tv_kl(logp, old_logp, adv, mask, *, delta_low=0.2, delta_high=0.2, adv_tau=1.0,
               kl_tau=1e-3):
    """prime-rl's default loss (its dppo_mask_low / dppo_mask_high, adv_tau, kl_tau, with
    its defaults): a token is dropped from the policy term if A > 0 and p - q > delta_high,
    or A <= 0 and p - q < -delta_low (p = exp(logp), q = exp(old_logp))."""
    x = prepare(logp, old_logp, adv, mask)
    return _masked_pg_with_kl(x, tv_dropped(x, delta_low, delta_high), adv_tau, kl_tau)


@LOSSES.register("ipo", default_agg="token-mean", acts_without_advantage=True,
                 diagnostics=("loss/prime/masked_frac",), engagement="loss/prime/masked_frac",
                 clipfrac="prime/masked_frac", domains={"threshold": "[0, inf)"} | TAUS,
                 title="IPO (prime-rl's symmetric trust region)", source=SOURCE,
                 summary="drop tokens whose probability moved more than a threshold either "
                         "way; r A plus kl_tau (log r)^2")
def ipo(logp, old_logp, adv, mask, *, threshold=0.1, adv_tau=1.0, kl_tau=1e-3):
    """prime-rl's `ipo` loss (ipo_threshold 0.1, adv_tau, kl_tau): a token is dropped from
    the policy term if |p - q| > threshold, whatever its advantage's sign."""
    x = prepare(logp, old_logp, adv, mask)
    dropped = (torch.exp(x.logp.detach()) - torch.exp(x.old_logp)).abs() > threshold
    return _masked_pg_with_kl(x, dropped, adv_tau, kl_tau)
