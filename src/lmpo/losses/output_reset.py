"""Output Reset (PPO-OR / GRPO-OR), arXiv 2607.18163."""

from __future__ import annotations

import torch

from lmpo.losses.base import OR_MARGIN, displacement_metrics, prepare, ratio_metrics
from lmpo.losses.diagnostics import POST_UPDATE
from lmpo.losses.registry import LOSSES

WEIGHTS = ("sign", "abs")


@POST_UPDATE.register("or_margin", domains={"alpha": "(0, inf)"})
def or_margin_after(new_logp, old_logp, adv, mask, *, alpha=OR_MARGIN) -> dict[str, float]:
    """Output Reset's margin after the update, for any loss: diag/or_residual_after (mean
    max(0, alpha - sign(A) rho)^2 over A != 0 tokens) and diag/or_overshoot_after (the share
    of those with sign(A) rho >= alpha)."""
    m = displacement_metrics(new_logp - old_logp, adv, mask, alpha)
    return {"diag/or_residual_after": m["or/residual"],
            "diag/or_overshoot_after": m["or/overshoot_frac"]}


@LOSSES.register("output_reset", default_agg="token-mean",
                 diagnostics=("loss/or/overshoot_frac", "diag/or_residual_after",
                              "diag/or_overshoot_after", "diag/displacement_seq_after"),
                 acts={"metric": "loss/or/overshoot_frac", "above": 0.0},
                 engagement="diag/or_overshoot_after",
                 twin={"loss": {"name": "importance_sampling"}},
                 readings=("loss/or/overshoot_frac",),
                 post_update={"displacement": {}, "or_margin": {"alpha": "alpha"}},
                 domains={"alpha": "(0, inf)", "weight": "{sign, abs}"},
                 title="Output Reset (PPO-OR, GRPO-OR)", source="arXiv 2607.18163",
                 summary="one-sided squared margin max(0, alpha - sign(A) rho)^2 in log-ratio "
                         "space: C^1, zero gradient past the margin")
def output_reset(logp, old_logp, adv, mask, *, alpha=0.2, weight="sign"):
    """L = max(0, alpha - sign(A) * rho)^2 for A != 0, else 0.

    A one-sided squared margin in log-ratio space: once the token has moved
    `alpha` in its advantage's direction the residual (and gradient) is zero.
    dL/drho = -2 sign(A) max(0, alpha - sign(A) rho), continuous at the margin
    (C^1). Only sign(A) enters; weight="abs" multiplies by |A| (lmpo option).
    """
    if weight not in WEIGHTS:
        raise ValueError(f"output_reset weight must be one of {WEIGHTS}, got {weight!r}")
    if alpha < 0:
        raise ValueError(f"output_reset alpha must be >= 0, got {alpha}")
    x = prepare(logp, old_logp, adv, mask)
    sigma = torch.sign(x.adv)
    active = x.adv != 0
    margin = sigma * x.rho
    residual = torch.relu(alpha - margin)
    loss = torch.where(active, residual.square(), torch.zeros_like(residual))
    if weight == "abs":
        loss = loss * x.adv.abs()
    metrics = ratio_metrics(x) | {  # or/* at this loss's own margin (and weight)
        "or/residual": x.mean(loss.detach(), active),
        "or/overshoot_frac": x.mean((margin >= alpha).to(loss.dtype), active),
        "or/active_frac": x.mean(active.to(loss.dtype)),
    }
    return x.zero_off_mask(loss), metrics
