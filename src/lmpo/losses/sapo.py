"""SAPO: soft adaptive policy optimisation (arXiv 2511.20347), as verl and TRL ship it."""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.registry import LOSSES

# the gate's value carries a constant 2 / tau: a tau near 0 overflows it (verl and TRL set
# no bound; verl's docs recommend tau_pos >= 1)
DAMPED = 0.99  # a gate weight below this damps the token's gradient by > 1%
TAUS = {"tau_pos": "[0.01, inf)", "tau_neg": "[0.01, inf)"}


@LOSSES.register("sapo", default_agg="seq-mean-token-mean",
                 peer_agg={"verl": "seq-mean-token-mean"},
                 diagnostics=("loss/sapo/gate_mean", "loss/sapo/damped_frac"),
                 acts={"metric": "loss/sapo/damped_frac", "above": 0.0},
                 engagement="loss/sapo/damped_frac",
                 clipfrac="sapo/damped_frac",  # what the verl adapter reports as pg_clipfrac
                 peer_keys={"verl": {"tau_pos": "tau_pos", "tau_neg": "tau_neg"},
                            "skyrl": {"tau_pos": "sapo.tau_pos", "tau_neg": "sapo.tau_neg"},
                            "trl": {"tau_pos": "sapo_temperature_pos",
                                    "tau_neg": "sapo_temperature_neg"}},
                 domains=TAUS, title="SAPO", source="arXiv 2511.20347",
                 summary="a smooth sigmoid gate on the token ratio in place of the clip, "
                         "sharper for negative advantages")
def sapo(logp, old_logp, adv, mask, *, tau_pos=1.0, tau_neg=1.05):
    """L = -f(r, tau) A with f(r, tau) = sigmoid(tau (r - 1)) * 4 / tau, tau = tau_pos for
    A > 0 and tau_neg otherwise (verl's `compute_policy_loss_sapo`, TRL's loss_type "sapo":
    sapo_temperature_pos / _neg, the same defaults 1.0 / 1.05).

    dL/dlogp = -A r 4 s (1 - s), s = sigmoid(tau (r - 1)): the on-policy gradient -A at
    r = 1, decaying smoothly as r leaves 1 (no token is cut off). verl's sapo ignores
    loss_agg_mode and always aggregates seq-mean-token-mean; TRL's "sapo" normalises the
    same way; that is this loss's default aggregation. Diagnostics: the mean gate weight
    4 s (1 - s) (1 at r = 1) and the share of tokens it damps by more than 1% (weight
    < 0.99, i.e. tau |r - 1| > 0.2: where a 0.2 clip at tau = 1 would act).
    """
    x = prepare(logp, old_logp, adv, mask)
    tau = torch.where(x.adv > 0, torch.as_tensor(tau_pos, dtype=x.adv.dtype),
                      torch.as_tensor(tau_neg, dtype=x.adv.dtype))
    s = torch.sigmoid(tau * (x.ratio - 1.0))
    loss = -(s * 4.0 / tau) * x.adv
    weight = (4.0 * s * (1.0 - s)).detach()
    metrics = ratio_metrics(x) | {"sapo/gate_mean": x.mean(weight),
                                  **x.shares("sapo/damped_frac", (weight < DAMPED).to(loss.dtype))}
    return x.zero_off_mask(loss), metrics
