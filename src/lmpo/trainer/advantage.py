"""The advantage stage: one call shape for both estimator families.

`advantage_stage(name)` picks, by the estimator's registry metadata `needs_critic`, one
of two functions with the same signature `(state, batch, scored, cfg) -> metrics` that
fill `batch.adv` ([B, T]) and, with a critic, `batch.old_values` and `batch.returns`:

- the critic family scores the last token of each response, takes the KL to the
  reference out of the token rewards when `kl.mode: reward`, and runs the estimator over
  the critic's values;
- the group family runs the estimator over the sequence scores and their group ids (and
  clusters) and broadcasts each sequence's advantage over its tokens.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from lmpo.advantages import PathStats, advantage_meta
from lmpo.models.forward import critic_values
from lmpo.trainer.batch import explained_variance


def token_rewards(batch, scored, cfg) -> torch.Tensor:
    """[B, T]: each response's score on its last token, less the KL to the reference where
    `kl.mode: reward` puts it there."""
    b, t = batch.resp_ids.shape
    rewards = torch.zeros(b, t, device=batch.resp_ids.device)
    rewards[torch.arange(b), scored.rollout.lengths - 1] = scored.scores.to(rewards.device)
    if cfg.kl.coef > 0 and cfg.kl.mode == "reward":
        coef = cfg.kl.coef if batch.kl_coef is None else batch.kl_coef  # kl.schedule's
        rewards = rewards - coef * (batch.old_logp - batch.ref_logp) * batch.resp_mask
    return rewards


def stop_bootstrap(batch, scored, controller) -> torch.Tensor | None:
    """[B] the value a critic estimator continues a stopped response's return with, where
    the rollout controller makes a stop a truncation (`bootstraps`): the critic's V(s_t) at
    the stop (its value at the last kept token, the state the stop was decided in); 0 for
    every other row. None where nothing is bootstrapped."""
    if not getattr(controller, "bootstraps", False):
        return None
    stopped = torch.tensor([r == "early_stop" for r in scored.rollout.stop_reason],
                           dtype=torch.bool, device=batch.old_values.device)
    if not stopped.any():
        return None
    last = batch.old_values[torch.arange(len(stopped)), scored.rollout.lengths - 1]
    return torch.where(stopped, last, torch.zeros_like(last))


def critic_advantages(state, batch, scored, cfg) -> dict:
    t = batch.resp_ids.shape[1]
    with torch.no_grad():
        batch.old_values = critic_values(state.critic, batch.ids, batch.mask, t) * batch.resp_mask
    batch.bootstrap = stop_bootstrap(batch, scored, state.controller)
    extra = {} if batch.bootstrap is None else {"bootstrap": batch.bootstrap}
    batch.adv, batch.returns, metrics = state.estimator(token_rewards(batch, scored, cfg),
                                                        batch.old_values, batch.resp_mask,
                                                        **extra)
    return metrics | {"value/explained_variance": explained_variance(
        batch.old_values, batch.returns, batch.resp_mask)}


def run_estimators(cfg) -> list[str]:
    """The estimators a run computes: its own and its same-batch comparators'."""
    return [cfg.advantage.name] + [
        spec["advantage"]["name"] for spec in cfg.log.comparators.values()
        if isinstance(spec, dict) and isinstance(spec.get("advantage"), dict)
        and "name" in spec["advantage"]]


def wants_paths(cfg) -> bool:
    """One of the run's estimators reads the policy's per-token path statistics (the
    training batch then computes them: `TrainBatch.paths`)."""
    return any(advantage_meta(n)["wants_paths"] for n in run_estimators(cfg))


def group_sequence_advantages(estimator, name: str, scored,
                              batch=None) -> tuple[torch.Tensor, dict]:
    """A group estimator's advantages over the scored samples, [B] (or [B, T] for one
    that wants the path statistics), with their tiers and what else its registry metadata
    asks for: lengths, per-function parts, baselines, the path statistics of `batch` (the
    training batch; needed only by an estimator that wants them)."""
    tiers = [p.cluster for p in scored.problems]
    meta, extra = advantage_meta(name), {}
    if meta["wants_lengths"]:
        extra["lengths"] = scored.rollout.response_mask.sum(-1)
    if meta["wants_parts"]:
        extra |= {"parts": scored.parts, "weights": scored.part_weights}
    if meta["wants_baselines"]:
        extra["baselines"] = scored.baselines
    if meta["wants_paths"]:
        if batch is None or batch.paths is None:
            raise ValueError(f"the {name} estimator needs the training batch's path "
                             "statistics (TrainBatch.paths)")
        logp, sum_sq = batch.paths
        extra["paths"] = PathStats(logp, sum_sq, batch.resp_mask, batch.is_weights)
    return estimator(scored.scores, scored.group_ids, clusters=tiers, **extra)


def per_token(adv: torch.Tensor, batch) -> torch.Tensor:
    """[B, T]: a group estimator's advantages on the batch's device, each sequence's
    broadcast over its tokens (an estimator of per-token advantages gives them as is)."""
    adv = adv.to(batch.resp_ids.device)
    return adv if adv.dim() == 2 else adv[:, None].expand(*batch.resp_ids.shape)


def group_advantages(state, batch, scored, cfg) -> dict:
    seq_adv, metrics = group_sequence_advantages(state.estimator, cfg.advantage.name, scored,
                                                 batch)
    batch.adv = per_token(seq_adv, batch)
    tiers = [p.cluster for p in scored.problems]
    return metrics | token_zero_frac(seq_adv, scored.rollout.response_mask, tiers)


def comparator_advantages(estimator, name: str, batch, scored, cfg) -> torch.Tensor:
    """[B, T] advantages of a comparator's `estimator` (registered as `name`, with its own
    state) on this batch, leaving the batch as it is: a group estimator on the samples'
    scores, a critic estimator on the run's critic values and token rewards."""
    if advantage_meta(name)["needs_critic"]:
        extra = {} if batch.bootstrap is None else {"bootstrap": batch.bootstrap}
        adv, _, _ = estimator(token_rewards(batch, scored, cfg), batch.old_values,
                              batch.resp_mask, **extra)
        return adv
    seq_adv, _ = group_sequence_advantages(estimator, name, scored, batch)
    return per_token(seq_adv, batch)


def rescored_advantages(estimator, name: str, controller, batch, scored, cfg) -> torch.Tensor:
    """[B, T] advantages of a copy of the run's estimator (`estimator`, with its own state)
    had this rollout's stopped responses been scored by another rollout controller: its
    stop score on every early-stopped row and its bootstrap where it makes a stop a
    truncation (the stop decisions are the run's)."""
    stopped = torch.tensor([r == "early_stop" for r in scored.rollout.stop_reason],
                           dtype=torch.bool)
    scores = scored.scores.clone()
    scores[stopped.to(scores.device)] = float(controller.stop_score)
    rescored = replace(scored, scores=scores)
    if advantage_meta(name)["needs_critic"]:
        boot = stop_bootstrap(batch, rescored, controller)
        extra = {} if boot is None else {"bootstrap": boot}
        adv, _, _ = estimator(token_rewards(batch, rescored, cfg), batch.old_values,
                              batch.resp_mask, **extra)
        return adv
    seq_adv, _ = group_sequence_advantages(estimator, name, rescored, batch)
    return per_token(seq_adv, batch)


def update_advantage_size(batch) -> dict[str, float]:
    """adv/abs_mean: mean |A| over the valid tokens of the samples the update trains on."""
    keep = batch.keep.to(batch.adv.device)
    mask = batch.resp_mask[keep]
    return {"adv/abs_mean": float((batch.adv[keep].abs() * mask).sum() / mask.sum().clamp(min=1))}


def advantage_stage(name: str):
    """The stage function for estimator `name`'s family."""
    return critic_advantages if advantage_meta(name)["needs_critic"] else group_advantages


def token_zero_frac(seq_adv: torch.Tensor, resp_mask: torch.Tensor,
                    tiers: list[str]) -> dict[str, float]:
    """`adv/zero_frac` as a share of response tokens with A == 0, overall and per tier
    (`seq_adv`: [B], one per sequence, or [B, T])."""
    zero = (seq_adv == 0).to(resp_mask.dtype).to(resp_mask.device)
    zero = (zero if zero.dim() == 2 else zero[:, None]) * resp_mask  # [B, T]
    tokens = resp_mask.sum(-1)
    out = {"adv/zero_frac": float(zero.sum() / tokens.sum().clamp(min=1))}
    for tier in dict.fromkeys(tiers):
        sel = torch.tensor([x == tier for x in tiers])
        out[f"adv/zero_frac/{tier}"] = float(zero[sel].sum() / tokens[sel].sum().clamp(min=1))
    return out
