"""The update: K epochs of minibatch optimiser steps over one rollout batch.

Each minibatch is a fixed share of the batch; its gradient is accumulated over
micro-batches with the minibatch's *global* token and sequence counts, so the
micro-batch size changes nothing but memory (tested to 1e-10 in float64).
Metrics are averaged over the updates actually applied (a skipped, non-finite
update contributes none).
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from lmpo.errors import RunError
from lmpo.masked import PROMPT_MEAN, masked_mean, prompt_weights
from lmpo.models.forward import ALL, forward_logprobs
from lmpo.trainer.batch import TrainBatch
from lmpo.trainer.objective import Micro, Objective


def autocast(cfg, device: torch.device):
    """The update's precision (optim.dtype): bfloat16 = torch.autocast over the forward and
    backward (matmuls in bfloat16; parameters, their gradients and the optimiser float32).
    lmpo.logprobs reduces bfloat16 logits in float32, so ratios and losses are float32."""
    return torch.autocast(device.type, dtype=torch.bfloat16,
                          enabled=cfg.optim.dtype == "bfloat16")


class NonFiniteError(RunError):
    """Updates kept going non-finite; names the term and the step."""


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


def accumulate_gradients(policy, objective: Objective, batch: TrainBatch, mb: torch.Tensor,
                         cfg, observers=(), schedules=None
                         ) -> tuple[dict[str, float], str | None]:
    """Forward and backward over the micro-batches of minibatch `mb` (sample indices), the
    objective's terms summed in order, one backward each; gradients accumulate in `.grad`.
    Returns (metrics, name of a non-finite term or None); on a non-finite term it stops
    before that micro-batch's backward. `observers` (same-batch comparators,
    lmpo.trainer.comparators) see each micro-batch's policy term without changing anything;
    `schedules` (RunState.schedules) give the entropy coefficient and see the entropy."""
    resp_mask = batch.resp_mask if batch.update_mask is None else batch.update_mask
    counts = {"num_tokens": resp_mask[mb].sum(), "num_seqs": (resp_mask[mb].sum(-1) > 0).sum(),
              # seq-mean-token-sum-norm's horizon: the fixed generation budget, not the longest row
              "horizon": cfg.rollout.max_new_tokens}
    objective.begin_minibatch(mb, resp_mask, batch=batch, counts=counts,
                              forward=lambda micro: micro_forward(policy, batch, micro, cfg),
                              micro_size=cfg.optim.micro_batch_size)
    agg = objective.agg
    params = [p for p in policy.parameters() if p.requires_grad] if observers else []
    sums: dict[str, float] = defaultdict(float)
    entropy_coef = None if schedules is None else schedules.entropy_coef()
    # each row's share under prompt-mean, over the whole minibatch, where the run's loss or
    # a comparator's aggregates so
    wanted = agg == PROMPT_MEAN or any(PROMPT_MEAN in getattr(obs, "aggs", ()) for obs in observers)
    weights = prompt_weights(resp_mask[mb], batch.group_ids[mb]) \
        if wanted and batch.group_ids is not None else None
    for start, micro in zip(range(0, len(mb), cfg.optim.micro_batch_size),
                            mb.split(cfg.optim.micro_batch_size), strict=True):
        m = resp_mask[micro]
        logp, ent, *head = micro_forward(policy, batch, micro, cfg, with_head=True)
        here = counts if weights is None else \
            counts | {"row_weights": weights[start:start + len(micro)].to(logp.device)}
        x = Micro(batch, micro, m, logp, ent, here, agg, logp.device,
                  lambda device=logp.device: autocast(cfg, device), entropy_coef,
                  head[0] if head else None)
        if schedules is not None:
            schedules.observe_entropy(ent, m)
        values, averaged = {}, {}
        for term in objective.terms:
            values[term.name], more, summed = term(x)
            averaged |= more
            for k, v in summed.items():
                sums[k] += v
            if term.policy:  # what the same-batch comparators replay
                for obs in observers:
                    obs.micro(logp, values[term.name], batch, micro, m, here, agg, params)
        bad = next((k for k, v in values.items() if not torch.isfinite(v)), None)
        if bad:
            return dict(sums), bad
        sum(values.values()).backward()
        frac = len(micro) / len(mb)
        for k, v in averaged.items():
            combine(sums, k, v, frac)
        for k, v in values.items():
            sums["loss/term_" + k] += float(v.detach())
        sums["policy/entropy_update"] += float(masked_mean(ent.detach(), m)) * frac
    return dict(sums), None


def micro_forward(policy, batch: TrainBatch, micro, cfg, with_head: bool = False):
    """(log-probs, entropies) [B, T] of micro-batch `micro` under the update's autocast;
    `with_head` and a batch that carries the sampler's head (loss.centered_score): a third
    element, (log pi at the head's tokens [B, T, k], the log-mass outside them [B, T])."""
    head = batch.behaviour_head if with_head else None
    if head is not None:
        head = ALL if head[0] is None else head[0][micro]
    with autocast(cfg, next(policy.parameters()).device):
        return forward_logprobs(policy, batch.ids[micro], batch.mask[micro],
                                batch.resp_ids[micro], cfg.rollout.temperature,
                                share_prompts=cfg.optim.shared_prefix, head=head)


def clip_metrics(norm: float, clip: float) -> dict[str, float]:
    """grad/norm: the pre-clip norm; grad/clipped_frac: 1 if clipping rescaled the step
    (as torch's clip_grad_norm_ decides: clip < norm + 1e-6); grad/step_norm: the norm of
    the step taken (post-clip). Averaged over the step's optimiser steps."""
    rescaled = clip < norm + 1e-6
    return {"grad/norm": norm, "grad/clipped_frac": float(rescaled),
            "grad/step_norm": norm * min(1.0, clip / (norm + 1e-6))}


def update_norm(policy, before: list[torch.Tensor]) -> float:
    """The norm of the parameter update the optimiser step just applied (the effective
    step: AdamW largely cancels the gradient's scale, so `grad/step_norm` does not say it);
    `before`: the trainable parameters before the step, in order."""
    after = [p.detach() for p in policy.parameters() if p.requires_grad]
    sq = sum(float(torch.sum((a.float() - b.float()) ** 2)) for a, b in zip(
        after, before, strict=True))
    return math.sqrt(sq)


def update(state, batch: TrainBatch, objective: Objective, cfg, *, lr: float, step: int,
           observers=()) -> dict:
    """`cfg.optim.epochs` passes over `batch.keep`, each split into `cfg.optim.minibatches`
    optimiser steps. Returns the metrics averaged over the applied updates (a _min or _max
    metric: its extreme over them), plus `train/updates`. Raises NonFiniteError after
    `cfg.max_nonfinite` consecutive non-finite updates (each is skipped)."""
    policy, critic, counters, schedules = state.policy, state.critic, state.counters, \
        state.schedules
    sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _epoch in range(cfg.optim.epochs):
        perm = batch.keep[torch.randperm(len(batch.keep), generator=state.rngs["shuffle"])]
        for mb in perm.chunk(cfg.optim.minibatches) if len(perm) else []:
            state.opt.zero_grad(set_to_none=True)
            if critic is not None:
                state.critic_opt.zero_grad(set_to_none=True)
            metrics, bad = accumulate_gradients(policy, objective, batch, mb, cfg, observers,
                                                schedules)
            for obs in observers:
                obs.end_minibatch()
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optim.grad_clip)
            if bad is None and not torch.isfinite(grad_norm):
                bad = "policy gradient"
            if schedules is not None:
                schedules.end_minibatch(applied=bad is None)
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
            before = [p.detach().clone() for p in policy.parameters() if p.requires_grad]
            state.opt.step()
            metrics["optim/update_norm"] = update_norm(policy, before)
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
    if schedules is not None:
        out |= schedules.end_step(batch, cfg)
    return out | {"train/updates": float(updates)}
