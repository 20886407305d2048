"""ROLL's policy-gradient variants that lmpo did not have: `topr` (tapered off-policy
REINFORCE, arXiv 2503.14286) and `kimi15` (Kimi k1.5's REINFORCE with a squared log-ratio
penalty, arXiv 2501.12599), as ROLL's actor writes them (`pg_variant`,
roll/pipeline/agentic/agentic_actor_pg_worker.py, 2026-08)."""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.pg import dro
from lmpo.losses.registry import LOSSES

ROLL = "roll/pipeline/agentic/agentic_actor_pg_worker.py"


@LOSSES.register("topr", default_agg="seq-mean-token-sum",
                 diagnostics=("loss/topr/negative_tapered_frac",),
                 engagement="loss/topr/negative_tapered_frac",
                 domains={"positive_weight": "[0, inf)", "negative_weight": "[0, inf)"},
                 title="TOPR (tapered off-policy REINFORCE)",
                 source=f"arXiv 2503.14286; ROLL {ROLL}",
                 summary="REINFORCE on positive samples, REINFORCE weighted by sg(clip(r, 0, "
                         "1)) on negative ones")
def topr(logp, old_logp, adv, mask, *, positive_weight=1.0, negative_weight=1.0):
    """L = -w+ A logp where A > 0, -w- sg(clip(r, 0, 1)) A logp elsewhere (ROLL's
    topr_positive_weight / topr_negative_weight, 1 and 1).

    The split: ROLL splits a sample on its episode score (> 0 positive), the paper on the
    sign of its reward; the loss sees the advantage, so lmpo splits on A > 0. The three
    agree wherever the score's sign and the advantage's do, which holds for 0/1 or -1/+1
    rewards with a group-mean baseline (A = 0 tokens carry no loss either way); with GAE or
    graded rewards they can differ. ROLL's TOPR recipe aggregates seq-mean-token-sum (this
    loss's default aggregation; its preset, like every preset of a method whose
    aggregation is not the method, takes the testbed's). Diagnostic: the share of negative
    tokens whose ratio the taper cuts (r > 1)."""
    x = prepare(logp, old_logp, adv, mask)
    positive = x.adv > 0
    taper = x.ratio.clamp(0.0, 1.0).detach()
    weight = torch.where(positive, torch.full_like(taper, positive_weight),
                         negative_weight * taper)
    loss = -weight * x.adv * x.logp
    cut = (~positive) & (x.ratio > 1.0)
    metrics = ratio_metrics(x) | x.shares("topr/negative_tapered_frac", cut.to(loss.dtype))
    return x.zero_off_mask(loss), metrics


@LOSSES.register("kimi15", default_agg="token-mean", acts_without_advantage=True,
                 diagnostics=("loss/dro/penalty_grad_frac",),
                 engagement="loss/dro/penalty_grad_frac", clipfrac="dro/penalty_grad_frac",
                 domains={"tau": "(0, inf)"}, title="Kimi k1.5 REINFORCE",
                 source=f"arXiv 2501.12599; ROLL {ROLL}",
                 summary="-A log pi plus tau/2 (log pi - log pi_old)^2: DRO's form, "
                         "ROLL's default tau 0.1")
def kimi15(logp, old_logp, adv, mask, *, tau=0.1):
    """L = -A logp + tau/2 (logp - old_logp)^2 (ROLL's kimi15_tau, 0.1): the same per-token
    loss as `dro` with beta = tau (verl's DRO and Kimi's penalty are one form), kept under
    ROLL's name and default."""
    return dro(logp, old_logp, adv, mask, beta=tau)
