"""The update: K epochs of minibatch optimiser steps over one rollout batch.

Each minibatch is a fixed share of the batch; its gradient is accumulated over
micro-batches with the minibatch's *global* token and sequence counts, so the
micro-batch size changes nothing but memory (tested to 1e-10 in float64).
Metrics are averaged over the updates actually applied (a skipped, non-finite
update contributes none).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from lmpo.errors import RunError
from lmpo.losses import aggregate, kl_penalty, off_policy_sequence_mask, value_loss
from lmpo.masked import masked_mean
from lmpo.models.forward import critic_values, forward_logprobs

UPDATE_DTYPES = ("float32", "bfloat16")


def autocast(cfg, device: torch.device):
    """The update's precision (optim.dtype): bfloat16 = torch.autocast over the forward and
    backward (matmuls in bfloat16; parameters, their gradients and the optimiser float32).
    lmpo.logprobs reduces bfloat16 logits in float32, so ratios and losses are float32."""
    return torch.autocast(device.type, dtype=torch.bfloat16,
                          enabled=cfg.optim.dtype == "bfloat16")


class NonFiniteError(RunError):
    """Updates kept going non-finite; names the term and the step."""


@dataclass
class TrainBatch:
    """One rollout batch, ready for the update."""

    ids: torch.Tensor  # [B, P+T] prompt + response
    mask: torch.Tensor  # [B, P+T]
    resp_ids: torch.Tensor  # [B, T]
    resp_mask: torch.Tensor  # [B, T] float
    old_logp: torch.Tensor  # [B, T] behaviour log-probs
    adv: torch.Tensor  # [B, T]
    keep: torch.Tensor  # [K] indices of the samples that take part (dynamic sampling)
    ref_logp: torch.Tensor | None = None  # [B, T], when a KL term needs it
    old_values: torch.Tensor | None = None  # [B, T], actor-critic only
    returns: torch.Tensor | None = None  # [B, T], actor-critic only
    bootstrap: torch.Tensor | None = None  # [B] the value after a truncated stop, or None
    pre_update: torch.Tensor | None = None  # [B, T] float32 log-probs before the update,
    # on the steps that compute them (a recompute, a low-precision rollout, diagnostics)
    pre_entropy: torch.Tensor | None = None  # [B, T] their entropy (low-precision rollouts)
    is_weights: torch.Tensor | None = None  # [B, T] a rollout correction's token weights
    update_mask: torch.Tensor | None = None  # [B, T] the mask after its rejection (None: as
    # resp_mask): the loss, its token counts and the value loss use it
    correct: torch.Tensor | None = None  # [B] exact correctness (loss.nll_coef's rows)


EXTREMES = ("_min", "_max")


def combine(sums: dict, key: str, value: float, weight: float) -> None:
    """Fold one micro-batch's (or one update's) metric into `sums`: an extreme (a key ending
    in _min or _max) stays the extreme over the whole step; anything else is a weighted sum
    (averaged by the caller)."""
    if key.endswith("_min"):
        sums[key] = min(sums.get(key, value), value)
    elif key.endswith("_max"):
        sums[key] = max(sums.get(key, value), value)
    else:
        sums[key] += value * weight


def accumulate_gradients(policy, critic, loss_fn, agg: str, batch: TrainBatch,
                         mb: torch.Tensor, cfg, shadows=None) -> tuple[dict[str, float],
                                                                       str | None]:
    """Forward and backward over the micro-batches of minibatch `mb` (sample indices);
    gradients accumulate in `.grad`. Returns (metrics, name of a non-finite term or None);
    on a non-finite term it stops before that micro-batch's backward. `shadows`
    (lmpo.trainer.shadow) see each micro-batch's log-probs without changing anything."""
    resp_mask = batch.resp_mask if batch.update_mask is None else batch.update_mask
    counts = {"num_tokens": resp_mask[mb].sum(), "num_seqs": (resp_mask[mb].sum(-1) > 0).sum(),
              # seq-mean-token-sum-norm's horizon: the fixed generation budget, not the longest row
              "horizon": cfg.rollout.max_new_tokens}
    nll = cfg.loss.nll_coef > 0
    if nll:  # the NLL term's own counts: the correct responses' tokens in the minibatch
        right = resp_mask[mb] * batch.correct[mb, None]
        nll_counts = counts | {"num_tokens": right.sum(), "num_seqs": (right.sum(-1) > 0).sum()}
    sums: dict[str, float] = defaultdict(float)
    threshold = entropy_threshold(policy, batch, mb, resp_mask, cfg)  # None: no selection
    for micro in mb.split(cfg.optim.micro_batch_size):
        m = resp_mask[micro]
        logp, ent = micro_forward(policy, batch, micro, cfg)
        loss_tok, loss_metrics = policy_loss_tokens(loss_fn, logp, batch, micro, m, cfg)
        if threshold is not None:  # the high-entropy tokens only (the "80/20" rule)
            keep = (ent.detach() >= threshold) & m.bool()
            loss_tok = loss_tok * keep
            loss_metrics["entropy_mask/kept_frac"] = float(keep.sum()) / max(int(m.sum()), 1)
        terms = {"policy": aggregate(loss_tok, m, agg, **counts)}
        if shadows is not None:  # the run's own weights from its policy term, graph kept
            shadows.micro(logp, terms["policy"], batch, micro, m, counts, agg,
                          [p for p in policy.parameters() if p.requires_grad])
        if nll:
            terms["nll"] = cfg.loss.nll_coef * aggregate(
                -logp * m, m * batch.correct[micro, None], agg, **nll_counts)
        if cfg.kl.coef > 0 and cfg.kl.mode == "loss":
            terms["kl"] = cfg.kl.coef * aggregate(kl_tokens(logp, batch, micro, cfg), m, agg,
                                                  **counts)
        if cfg.optim.entropy_coef:
            terms["entropy"] = -cfg.optim.entropy_coef * aggregate(ent, m, agg, **counts)
        if critic is not None:
            vl, v_metrics = value_term(critic, batch, micro, m, counts, cfg, logp.device)
            terms["value"] = cfg.critic.value_coef * vl
            sums["value/loss"] += float(vl.detach())
        bad = next((k for k, x in terms.items() if not torch.isfinite(x)), None)
        if bad:
            return dict(sums), bad
        sum(terms.values()).backward()
        frac = len(micro) / len(mb)
        for k, x in loss_metrics.items():
            combine(sums, "loss/" + k, x, frac)
        for k, x in terms.items():
            sums["loss/term_" + k] += float(x.detach())
        if critic is not None:
            for k, x in v_metrics.items():
                combine(sums, k, x, frac)
        sums["policy/entropy_update"] += float(masked_mean(ent.detach(), m)) * frac
    return dict(sums), None


def micro_forward(policy, batch: TrainBatch, micro, cfg):
    """(log-probs, entropies) [B, T] of micro-batch `micro` under the update's autocast."""
    with autocast(cfg, next(policy.parameters()).device):
        return forward_logprobs(policy, batch.ids[micro], batch.mask[micro],
                                batch.resp_ids[micro], cfg.rollout.temperature,
                                share_prompts=cfg.optim.shared_prefix)


def entropy_threshold(policy, batch: TrainBatch, mb, resp_mask, cfg):
    """loss.top_entropy_quantile q < 1: the (1 - q) quantile of the current policy's
    entropy over the minibatch's response tokens (a no-grad pass over its micro-batches
    first, so that the selection does not depend on the micro-batch size); None at q = 1.
    TRL takes the quantile over each micro-batch (gathered across processes)."""
    q = cfg.loss.top_entropy_quantile
    if q >= 1.0:
        return None
    ents = []
    with torch.no_grad():
        for micro in mb.split(cfg.optim.micro_batch_size):
            ents.append(micro_forward(policy, batch, micro, cfg)[1][resp_mask[micro] > 0])
    ents = torch.cat(ents)
    return torch.quantile(ents, 1.0 - q) if ents.numel() else None


def policy_loss_tokens(loss_fn, logp, batch: TrainBatch, micro, m, cfg):
    """The loss's per-token loss on one micro-batch, times OPSM's mask when
    loss.off_policy_mask_threshold is set (any loss) and the rollout correction's
    weights (as verl: pg_losses * rollout_is_weights); with its metrics."""
    loss_tok, metrics = loss_fn(logp, batch.old_logp[micro], batch.adv[micro], m)
    if cfg.loss.off_policy_mask_threshold is not None:
        keep, mask_metrics = off_policy_sequence_mask(
            logp, batch.old_logp[micro], batch.adv[micro], m, cfg.loss.off_policy_mask_threshold)
        loss_tok, metrics = loss_tok * keep, metrics | mask_metrics
    if batch.is_weights is not None:
        loss_tok = loss_tok * batch.is_weights[micro]
    return loss_tok, metrics


def kl_tokens(logp, batch: TrainBatch, micro, cfg) -> torch.Tensor:
    """The per-token KL estimate to the reference; with kl.bias_correction, times the
    differentiable ratio pi / pi_old (the samples come from pi_old)."""
    kl_tok = kl_penalty(logp, batch.ref_logp[micro], cfg.kl.kind)
    if cfg.kl.bias_correction:
        kl_tok = kl_tok * torch.exp((logp - batch.old_logp[micro]).clamp(-20, 20))
    return kl_tok


def value_term(critic, batch: TrainBatch, micro: torch.Tensor, m: torch.Tensor, counts: dict,
               cfg, device: torch.device) -> tuple[torch.Tensor, dict]:
    """The critic's clipped value loss on one micro-batch, token-mean, and its metrics."""
    with autocast(cfg, device):
        v = critic_values(critic, batch.ids[micro], batch.mask[micro], m.shape[1]).float()
    vl_tok, v_metrics = value_loss(v, batch.old_values[micro], batch.returns[micro], m,
                                   clip=cfg.critic.value_clip)
    return aggregate(vl_tok, m, "token-mean", num_tokens=counts["num_tokens"]), v_metrics


def clip_metrics(norm: float, clip: float) -> dict[str, float]:
    """grad/norm: the pre-clip norm; grad/clipped_frac: 1 if clipping rescaled the step
    (as torch's clip_grad_norm_ decides: clip < norm + 1e-6); grad/step_norm: the norm of
    the step taken (post-clip). Averaged over the step's optimiser steps."""
    rescaled = clip < norm + 1e-6
    return {"grad/norm": norm, "grad/clipped_frac": float(rescaled),
            "grad/step_norm": norm * min(1.0, clip / (norm + 1e-6))}


def update(state, batch: TrainBatch, loss_fn, agg: str, cfg, *, lr: float, step: int,
           shadows=None) -> dict:
    """`cfg.optim.epochs` passes over `batch.keep`, each split into `cfg.optim.minibatches`
    optimiser steps. Returns the metrics averaged over the applied updates (a _min or _max
    metric: its extreme over them), plus `train/updates`. Raises NonFiniteError after
    `cfg.max_nonfinite` consecutive non-finite updates (each is skipped)."""
    policy, critic, counters = state.policy, state.critic, state.counters
    sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _epoch in range(cfg.optim.epochs):
        perm = batch.keep[torch.randperm(len(batch.keep), generator=state.rngs["shuffle"])]
        for mb in perm.chunk(cfg.optim.minibatches) if len(perm) else []:
            state.opt.zero_grad(set_to_none=True)
            if critic is not None:
                state.critic_opt.zero_grad(set_to_none=True)
            metrics, bad = accumulate_gradients(policy, critic, loss_fn, agg, batch, mb, cfg,
                                                shadows)
            if shadows is not None:
                shadows.end_minibatch()
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optim.grad_clip)
            if bad is None and not torch.isfinite(grad_norm):
                bad = "policy gradient"
            if bad is not None:
                counters.nonfinite_streak += 1
                counters.skipped += 1
                if counters.nonfinite_streak >= cfg.max_nonfinite:
                    raise NonFiniteError(
                        f"step {step}: the {bad} term went non-finite in "
                        f"{counters.nonfinite_streak} consecutive updates")
                continue
            counters.nonfinite_streak = 0
            for group in state.opt.param_groups:
                group["lr"] = lr
            state.opt.step()
            if critic is not None:
                metrics["grad/critic_norm"] = float(torch.nn.utils.clip_grad_norm_(
                    critic.parameters(), cfg.optim.grad_clip))
                state.critic_opt.step()
            metrics |= clip_metrics(float(grad_norm), cfg.optim.grad_clip)
            for k, v in metrics.items():
                combine(sums, k, v, 1.0)
            updates += 1
    out = {k: v if k.endswith(EXTREMES) else v / updates
           for k, v in sums.items()} if updates else {}
    return out | {"train/updates": float(updates)}
