"""PPO-clip (asymmetric eps, dual clip), GSPO, CISPO and REINFORCE."""

from __future__ import annotations

import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.registry import CLIP, DUAL_CLIP, LOSSES, SKYRL_CLIP, TRL_CLIP, VERL_CLIP

# TRL's `delta` (INTELLECT-2's two-sided clip): the unclipped term's ratio capped at delta
TWO_SIDED = {"delta": "(1, inf) | None"}
TRL_DELTA = {"delta": ("delta",)}


def clip_fractions(x, eps_low: float, eps_high: float) -> dict[str, float]:
    """Shares of valid tokens in PPO's two zero-gradient regions.

    clipfrac_low: A < 0 and r < 1-eps_low; clipfrac_high: A > 0 and r > 1+eps_high;
    clipfrac: either (equals verl's pg_clipfrac).
    """
    low = ((x.ratio < 1 - eps_low) & (x.adv < 0)).to(x.ratio.dtype)
    high = ((x.ratio > 1 + eps_high) & (x.adv > 0)).to(x.ratio.dtype)
    return {
        **x.shares("clipfrac", low + high),
        **x.shares("clipfrac_low", low),
        **x.shares("clipfrac_high", high),
    }


def check_dual_clip(clip_ratio_c: float | None) -> None:
    if clip_ratio_c is not None and clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual clip), got {clip_ratio_c}")


def dual_clip(x, loss: torch.Tensor, clip_ratio_c: float | None, metrics: dict) -> torch.Tensor:
    """PPO's dual clip (verl's clip_ratio_c): for A < 0 the loss is min(L, -c A), so a
    negative-advantage token's ratio stops pulling past c; `clipfrac_dual` counts where it
    binds (added to `metrics`). `loss` unchanged with no c."""
    if clip_ratio_c is None:
        return loss
    loss3 = -x.adv * clip_ratio_c
    dual = (x.adv < 0) & (loss > loss3)
    metrics["clipfrac_dual"] = x.mean(dual.to(loss.dtype))
    return torch.where(x.adv < 0, torch.minimum(loss3, loss), loss)


@LOSSES.register("ppo_clip", dual_clip="offered", default_agg="token-mean",
                 diagnostics=("loss/clipfrac_low", "loss/clipfrac_high"),
                 acts={"metric": "loss/clipfrac", "above": 0.0}, engagement="loss/clipfrac",
                 peer_keys={"verl": VERL_CLIP | {"clip_ratio_c": ("clip_ratio_c",)},
                            "trl": TRL_CLIP | TRL_DELTA, "skyrl": SKYRL_CLIP},
                 domains=CLIP | DUAL_CLIP | TWO_SIDED,
                 title="PPO-clip (PPO, GRPO, DAPO)", source="arXiv 1707.06347",
                 summary="clipped ratio surrogate, asymmetric eps (clip-higher), optional "
                         "dual clip or two-sided clip")
def ppo_clip(logp, old_logp, adv, mask, *, eps_low=0.2, eps_high=0.2, clip_ratio_c=None,
             delta=None):
    """L = -min(r*A, clip(r, 1-eps_low, 1+eps_high)*A); dual clip for A<0: min(L, -c*A).

    Written as verl's `vanilla` loss (max of negated terms) so both agree bitwise.
    `delta` is TRL's two-sided clip (GRPOConfig.delta, INTELLECT-2, arXiv 2505.07291): the
    unclipped term's ratio is min(r, delta), so a token whose ratio passed delta has no
    gradient whatever its advantage (TRL clamps coef_1 after taking the clipped term).
    """
    check_dual_clip(clip_ratio_c)
    x = prepare(logp, old_logp, adv, mask)
    loss1 = -x.adv * (x.ratio if delta is None else x.ratio.clamp(max=delta))
    loss2 = -x.adv * x.ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = torch.maximum(loss1, loss2)
    metrics = ratio_metrics(x) | clip_fractions(x, eps_low, eps_high)
    loss = dual_clip(x, loss, clip_ratio_c, metrics)
    return x.zero_off_mask(loss), metrics


@LOSSES.register("gspo", dual_clip="offered",
                 default_agg="seq-mean-token-mean", diagnostics=("loss/clipfrac",),
                 acts={"metric": "loss/clipfrac", "above": 0.0}, engagement="loss/clipfrac",
                 peer_keys={"verl": VERL_CLIP, "skyrl": SKYRL_CLIP},
                 domains=CLIP | DUAL_CLIP | TWO_SIDED,
                 title="GSPO", source="arXiv 2507.18071",
                 summary="PPO-clip on the length-normalised sequence ratio, optional dual "
                         "clip")
def gspo(logp, old_logp, adv, mask, *, eps_low=3e-4, eps_high=4e-4, clip_ratio_c=None,
         delta=None):
    """GSPO: PPO-clip on the sequence ratio s_i = exp(mean_t rho_{i,t}).

    Token form r = sg(s_i) * exp(logp - sg(logp)), so each token's gradient is
    the sequence ratio times its own score function. The log sequence ratio is
    clamped at 10 from above, as in verl. Optional dual clip (an lmpo extension: verl's
    GSPO has none), on the sequence ratio as PPO's is on the token ratio: for A < 0,
    L = min(L, -c A). `delta` caps the unclipped term's sequence ratio as `ppo_clip`'s
    (TRL applies its GRPOConfig.delta at the sequence level too).
    """
    check_dual_clip(clip_ratio_c)
    x = prepare(logp, old_logp, adv, mask)
    m = x.mask.to(x.logp.dtype)
    raw = x.logp - x.old_logp  # unclamped per-token log ratio, 0 off-mask
    seq_log_ratio = (raw * m).sum(-1) / m.sum(-1).clamp(min=1)  # [B]
    log_r = x.logp - x.logp.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(log_r.clamp(max=10.0))
    loss1 = -x.adv * (ratio if delta is None else ratio.clamp(max=delta))
    loss2 = -x.adv * ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = torch.maximum(loss1, loss2)
    seq = ratio.detach()
    metrics = ratio_metrics(x) | {
        **x.shares("clipfrac", (loss2 > loss1).to(loss.dtype)),
        "seq_ratio_mean": x.mean(seq),
    }
    loss = dual_clip(x, loss, clip_ratio_c, metrics)
    return x.zero_off_mask(loss), metrics


@LOSSES.register("bnpo", dual_clip="peer", default_agg="token-mean", batch_token_mean=True,
                 diagnostics=("loss/clipfrac_low", "loss/clipfrac_high"),
                 acts={"metric": "loss/clipfrac", "above": 0.0}, engagement="loss/clipfrac",
                 peer_keys={"trl": TRL_CLIP | TRL_DELTA}, domains=CLIP | TWO_SIDED,
                 title="BNPO (TRL's batch-normalised PPO)",
                 source="TRL GRPOTrainer loss_type bnpo",
                 summary="PPO-clip averaged over the tokens of the local batch (each "
                         "micro-batch by its own token count)")
def bnpo(logp, old_logp, adv, mask, *, eps_low=0.2, eps_high=0.2, delta=None):
    """TRL's loss_type "bnpo": PPO-clip's per-token loss (`ppo_clip`, no dual clip), averaged
    over the valid tokens of the batch it is computed on, (sum L) / (sum mask), then divided
    by the gradient-accumulation steps. It differs from "dapo" only in that normaliser (the
    local micro-batch's tokens, not the generation batch's): registry metadata
    `batch_token_mean` makes the TRL adapter use it. In lmpo's own trainer token-mean is
    already over the optimiser minibatch's tokens, so there bnpo equals ppo_clip."""
    return ppo_clip(logp, old_logp, adv, mask, eps_low=eps_low, eps_high=eps_high, delta=delta)


@LOSSES.register("luspo", dual_clip="peer", default_agg="seq-mean-token-sum", agg_is_method=True,
                 diagnostics=("loss/clipfrac",),
                 acts={"metric": "loss/clipfrac", "above": 0.0}, engagement="loss/clipfrac",
                 peer_keys={"trl": TRL_CLIP | TRL_DELTA}, domains=CLIP | TWO_SIDED,
                 title="LUSPO",
                 source="arXiv 2602.05261",
                 summary="GSPO's sequence-ratio clip with each sequence's loss scaled by its "
                         "length (token sum, mean over sequences)")
def luspo(logp, old_logp, adv, mask, *, eps_low=3e-4, eps_high=4e-4, delta=None):
    """LUSPO (TRL's loss_type "luspo", importance_sampling_level "sequence"): GSPO's clipped
    sequence-ratio surrogate, aggregated as the sum over each sequence's tokens and the
    mean over sequences (`seq-mean-token-sum`, the default), so that a sequence weighs by
    its length. The per-token loss is GSPO's (`gspo`, no dual clip); TRL takes the clip
    from GRPOConfig's epsilon / epsilon_high (0.2 unless set), the defaults here are
    GSPO's. TRL averages over every row, an empty one included; lmpo over rows with a token."""
    return gspo(logp, old_logp, adv, mask, eps_low=eps_low, eps_high=eps_high, delta=delta)


@LOSSES.register("cispo", dual_clip="bounded",
                 default_agg="token-mean", diagnostics=("loss/clipfrac",),
                 peer_keys={"verl": VERL_CLIP,
                            "skyrl": {"eps_low": "cispo.cispo_eps_clip_low",
                                      "eps_high": "cispo.cispo_eps_clip_high"}},
                 # eps_low 0: weights no lower than 1 (SkyRL's default cispo_eps_clip_low)
                 domains={"eps_low": "[0, 1]", "eps_high": "(0, inf)"}, title="CISPO",
                 source="arXiv 2506.13585",
                 summary="REINFORCE weighted by a clipped, stop-gradient ratio; no token "
                         "dropped")
def cispo(logp, old_logp, adv, mask, *, eps_low=1.0, eps_high=5.0):
    """CISPO: L = -sg(clip(r, 1-eps_low, 1+eps_high)) * A * logp (no token is dropped)."""
    x = prepare(logp, old_logp, adv, mask)
    weight = x.ratio.clamp(1 - eps_low, 1 + eps_high).detach()
    loss = -weight * x.adv * x.logp
    metrics = ratio_metrics(x) | {
        **x.shares("clipfrac", (weight != x.ratio.detach()).to(loss.dtype)),
    }
    return x.zero_off_mask(loss), metrics


@LOSSES.register("reinforce", default_agg="token-mean", preset_keys=("optim.minibatches",),
                 score_function=True,  # -A log pi: loss.centered_score applies
                 title="REINFORCE / RLOO", source="Williams 1992",
                 summary="-A logp, no ratio: one on-policy update per batch")
def reinforce(logp, old_logp, adv, mask):
    """Vanilla policy gradient L = -A * logp (assumes on-policy samples; no ratio)."""
    x = prepare(logp, old_logp, adv, mask)
    return x.zero_off_mask(-x.adv * x.logp), ratio_metrics(x)


@LOSSES.register("rollout_is", dual_clip="bounded",
                 default_agg="token-mean", diagnostics=("loss/clipfrac",),
                 engagement="loss/clipfrac", domains=CLIP,
                 title="rollout IS (GLM-5's agentic loss)",
                 source="arXiv 2602.15763 sec. 4.1.2; SkyRL policy_loss_type rollout_is",
                 summary="REINFORCE weighted by the stop-gradient ratio to the sampler, zero "
                         "outside (1 - eps_low, 1 + eps_high): CISPO with IcePop's hard zero")
def rollout_is(logp, old_logp, adv, mask, *, eps_low=0.2, eps_high=0.2):
    """L = -sg(r * 1[1 - eps_low < r < 1 + eps_high]) * A * logp (SkyRL's
    `rollout_is_policy_loss`, its eps_clip_low / eps_clip_high 0.2 / 0.2). The ratio is to
    the sampler's log-probs: lmpo's old_logp under rollout.old_logp: rollout (the default).
    SkyRL exponentiates the clamped log-ratio in float32; here in the input's dtype.
    Diagnostic: the share of tokens outside the band (weight 0)."""
    x = prepare(logp, old_logp, adv, mask)
    inside = (x.ratio > 1 - eps_low) & (x.ratio < 1 + eps_high)
    weight = torch.where(inside, x.ratio, torch.zeros_like(x.ratio)).detach()
    loss = -weight * x.adv * x.logp
    return x.zero_off_mask(loss), ratio_metrics(x) | x.shares("clipfrac", (~inside).to(loss.dtype))


@LOSSES.register("reinforce_seq_is", default_agg="token-mean", diagnostics=("loss/clipfrac",),
                 engagement="loss/clipfrac", domains={"threshold": "(0, inf)"},
                 peer_keys={"verl": {"threshold": (
                     "policy_loss.rollout_correction.rollout_is_threshold",)}},
                 title="REINFORCE with truncated sequence IS (verl's bypass mode)",
                 source="verl rollout_correction: bypass_mode, loss_type reinforce, "
                        "rollout_is sequence",
                 summary="-A logp weighted by the response's stop-gradient sequence ratio to "
                         "the sampler, truncated at threshold")
def reinforce_seq_is(logp, old_logp, adv, mask, *, threshold=2.0):
    """L = -sg(min(exp(clamp(sum_t (logp_t - old_t), -20, 20)), threshold)) * A * logp:
    verl's bypass_mode with loss_type reinforce and rollout_is sequence (its default), the
    sequence ratio recomputed from the current policy on each call, with verl's safety clamp
    of the summed log-ratio at +-20. The ratio is to the sampler's log-probs: lmpo's
    old_logp under rollout.old_logp: rollout (the default). Its token-level twin is cispo
    with eps_low 1 and eps_high threshold - 1. Diagnostic: the share of tokens whose
    response's weight was truncated."""
    x = prepare(logp, old_logp, adv, mask)
    log_w = (x.logp - x.old_logp).masked_fill(~x.mask, 0).sum(-1, keepdim=True).detach()
    raw = log_w.clamp(-20.0, 20.0).exp().expand_as(x.logp)
    weight = raw.clamp(max=threshold)
    loss = -weight * x.adv * x.logp
    return x.zero_off_mask(loss), ratio_metrics(x) | x.shares(
        "clipfrac", (raw > threshold).to(loss.dtype))
