"""Ratio-free policy-gradient losses the engines ship: GPG and DRO."""

from __future__ import annotations

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.registry import LOSSES


@LOSSES.register("gpg", default_agg="token-mean", title="GPG", source="arXiv 2504.02546",
                 score_function=True,  # -A log pi: loss.centered_score applies
                 preset_keys=("optim.minibatches",),  # no ratio: one on-policy update
                 summary="plain policy gradient -A log pi (no ratio, no clip); GPG's "
                         "advantage is the `gpg` estimator")
def gpg(logp, old_logp, adv, mask):
    """L = -A * logp (verl's `compute_policy_loss_gpg`: no ratio and no clip; the method
    lives in its advantage, the `gpg` estimator). verl's default aggregation is token-mean."""
    x = prepare(logp, old_logp, adv, mask)
    return x.zero_off_mask(-x.adv * x.logp), ratio_metrics(x)


@LOSSES.register("dro", default_agg="token-mean",
                 clipfrac="dro/penalty_grad_frac",  # what the verl adapter reports as pg_clipfrac
                 diagnostics=("loss/dro/penalty_grad_frac",),
                 acts={"metric": "loss/dro/penalty_grad_frac", "above": 0.0},
                 engagement="loss/dro/penalty_grad_frac", acts_without_advantage=True,
                 peer_keys={"verl": {"beta": "policy_loss.dro_beta"}},
                 domains={"beta": "(0, inf)"}, title="DRO (Direct Reward Optimisation)",
                 source="arXiv 2405.19107",
                 summary="policy gradient -A log pi plus a quadratic penalty beta/2 rho^2 on "
                         "the log-ratio (a smooth trust region)")
def dro(logp, old_logp, adv, mask, *, beta=0.05):
    """L = -(A * logp - beta/2 * rho^2), rho = logp - old_logp (verl's
    `compute_policy_loss_dro`; Tinker's `dro` loss has the same per-token form).

    dL/dlogp = -A + beta * rho. verl has no default for `dro_beta` (it must be set);
    0.05 here is lmpo's. The penalty acts on every token, an A = 0 one included (it is
    inert only at rho = 0). rho is clamped to +-20 as every ratio loss clamps it (verl does
    not clamp here; the two agree for |rho| <= 20). Diagnostic: the penalty's share of the
    per-token gradient magnitude, sum |beta rho| / sum (|A| + |beta rho|).
    """
    x = prepare(logp, old_logp, adv, mask)
    loss = -(x.adv * x.logp - 0.5 * beta * x.rho.square())
    pen = (beta * x.rho).abs().detach()
    total = float((pen + x.adv.abs())[x.mask].sum())
    share = float(pen[x.mask].sum()) / total if total > 0 else 0.0
    return x.zero_off_mask(loss), ratio_metrics(x) | {"dro/penalty_grad_frac": share}


@LOSSES.register("importance_sampling", default_agg="token-mean",
                 title="Importance-sampled policy gradient (unclipped)",
                 source="SkyRL `importance_sampling` (Tinker's loss of that name)",
                 summary="-r A per token, r = pi / pi_old, no clip: the policy gradient "
                         "corrected to the sampling policy, with no trust region")
def importance_sampling(logp, old_logp, adv, mask):
    """L = -r * A, r = exp(logp - old_logp) (SkyRL's `importance_sampling` policy loss,
    Tinker's semantics), no clip: dL/dlogp = -r A on every token, however far r has moved.

    SkyRL sums the masked per-token loss after dividing the advantages by its
    `loss_reduction`'s normaliser (token_mean by default), which is token-mean
    aggregation: lmpo's default here. rho is clamped to +-20 as every ratio loss clamps it
    (SkyRL does not clamp this one; the two agree for |rho| <= 20)."""
    x = prepare(logp, old_logp, adv, mask)
    return x.zero_off_mask(-x.ratio * x.adv), ratio_metrics(x)


@LOSSES.register("cross_entropy", default_agg="token-mean", acts_without_advantage=True,
                 preset_keys=("optim.minibatches",),
                 title="Cross-entropy (SFT in the loop)",
                 source="SkyRL `cross_entropy` (PolicyLossType.CROSS_ENTROPY)",
                 summary="-log pi of the sampled tokens, whatever their advantage: "
                         "supervised learning on the batch, in the RL loop")
def cross_entropy(logp, old_logp, adv, mask):
    """L = -logp per token (SkyRL's `cross_entropy`): the advantage is not read, so every
    sampled token is imitated; dL/dlogp = -1."""
    x = prepare(logp, old_logp, adv, mask)
    return x.zero_off_mask(-x.logp), ratio_metrics(x)

