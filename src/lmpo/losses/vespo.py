"""VESPO: variational sequence-level soft policy optimisation (arXiv 2602.10693), as TRL
ships it (GRPOTrainer loss_type "vespo", `get_gamma_weights`)."""

from __future__ import annotations

import math

import torch

from lmpo.losses.base import RHO_CLAMP, prepare, ratio_metrics
from lmpo.losses.registry import LOSSES

LOG_W_MIN = math.log(1e-8)  # TRL's lower clamp of the log sequence weight


@LOSSES.register("vespo", default_agg="token-mean",
                 diagnostics=("loss/vespo/phi_seq_mean", "loss/vespo/reweighted_frac"),
                 acts={"metric": "loss/vespo/reweighted_frac", "above": 0.0},
                 engagement="loss/vespo/reweighted_frac",
                 peer_keys={"trl": {"k_pos": "vespo_k_pos", "lambda_pos": "vespo_lambda_pos",
                                    "k_neg": "vespo_k_neg", "lambda_neg": "vespo_lambda_neg"}},
                 domains={"k_pos": "[0, inf)", "lambda_pos": "[0, inf)", "k_neg": "[0, inf)",
                          "lambda_neg": "[0, inf)"},
                 title="VESPO", source="arXiv 2602.10693",
                 summary="REINFORCE weighted by a smooth Gamma function of the sequence "
                         "importance weight, phi(w) = e^lambda w^k e^(-lambda w)")
def vespo(logp, old_logp, adv, mask, *, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
    """L = -sg(phi(w)) * A * logp, with the sequence weight w = exp(sum_t rho_t) (a sum, not a
    mean; each rho clamped to +-20, log w to [log 1e-8, 20]) and

        phi(w) = exp(lambda + k log w - lambda w)     (phi(1) = 1, peak at w = k / lambda)

    k, lambda = (k_pos, lambda_pos) for A >= 0, (k_neg, lambda_neg) for A < 0 (lambda
    clamped at 1e-4), a non-finite phi set to 0 (TRL's defaults and constants). phi only
    scales the gradient (detached). TRL aggregates it with DAPO's token normaliser (lmpo's
    token-mean, the default). Diagnostics: the mean phi per token and the share of tokens
    whose phi is more than 10% from 1 (reweighted: damped or amplified)."""
    x = prepare(logp, old_logp, adv, mask)
    m = x.mask.to(x.rho.dtype)
    seq_log_w = ((x.logp - x.old_logp).clamp(-RHO_CLAMP, RHO_CLAMP) * m).sum(-1, keepdim=True)
    log_w = seq_log_w.detach().clamp(LOG_W_MIN, 20.0)
    nonneg = x.adv >= 0
    k = torch.where(nonneg, torch.as_tensor(k_pos, dtype=m.dtype),
                    torch.as_tensor(k_neg, dtype=m.dtype))
    lam = torch.where(nonneg, torch.as_tensor(lambda_pos, dtype=m.dtype),
                      torch.as_tensor(lambda_neg, dtype=m.dtype)).clamp(min=1e-4)
    phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w))
    phi = phi.nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).detach()
    loss = -phi * x.adv * x.logp
    reweighted = ((phi - 1).abs() > 0.1).to(m.dtype)
    metrics = ratio_metrics(x) | {"vespo/phi_seq_mean": x.mean(phi),
                                  **x.shares("vespo/reweighted_frac", reweighted)}
    return x.zero_off_mask(loss), metrics
