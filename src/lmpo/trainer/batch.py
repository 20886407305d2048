"""Turning a rollout into training tensors: the batch the update takes (`TrainBatch`),
scores per sample, and the explained variance of the critic (the passes over the policy
and critic: `lmpo.models.forward`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmpo.rewards import Reward, RewardError


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
    sampler_logp: torch.Tensor | None = None  # [B, T] the sampler's own log-probs, where a
    # mask reads them beside pre_update (loss.seq_divergence_threshold)
    behaviour_head: tuple | None = None  # the sampler's distribution at every response
    # position, (top-k ids [B, T, k] or None, log-probs [B, T, k or V], log-mass outside
    # them [B, T]) (loss.centered_score; models.forward.behaviour_head)
    is_weights: torch.Tensor | None = None  # [B, T] a rollout correction's token weights
    update_mask: torch.Tensor | None = None  # [B, T] the mask after its rejection (None: as
    # resp_mask): the loss, its token counts and the value loss use it
    correct: torch.Tensor | None = None  # [B] exact correctness (loss.nll_coef's rows)
    kl_coef: float | None = None  # this step's KL coefficient where a schedule sets it
    group_ids: torch.Tensor | None = None  # [B] each sample's prompt (loss.agg prompt-mean)
    paths: tuple | None = None  # ([B, T] log-probs, [B, T] sum_v pi_v^2) of the policy at
    # rollout, where an estimator wants the path statistics (registry metadata wants_paths)


def score_rollout(reward: Reward, problems, texts: list[str], stop_reason: list[str], *,
                  stop_score: float | None, on_error: str, train: bool = True
                  ) -> tuple[list[float | None], list[bool], int]:
    """Scores per sequence (None = no score), exact correctness, and the number of samples
    whose reward function raised and were scored 0 (`on_error="zero"`; "raise" re-raises
    the `RewardError` that names the sample). A sequence the rollout controller stopped
    gets `stop_score` and is never correct (an absorbing failure), or, with `stop_score`
    None, is scored like any other (an ordinary truncation). `train=False` scores without
    counting in the reward's training statistics (a greedy baseline)."""
    live = [i for i, r in enumerate(stop_reason) if stop_score is None or r != "early_stop"]
    scores: list[float | None] = [stop_score] * len(problems)
    correct = [False] * len(problems)
    errors = 0
    try:
        got, ok = reward.score([problems[i] for i in live], [texts[i] for i in live],
                               index=live, train=train)
        pairs = list(zip(got, ok, strict=True))
    except RewardError:
        if on_error != "zero":
            raise
        pairs = []
        for i in live:  # find the failing samples; they score 0
            try:
                one, good = reward.score([problems[i]], [texts[i]], index=[i], train=train)
                pairs.append((one[0], good[0]))
            except RewardError:
                pairs.append((0.0, False))
                errors += 1
    for i, (s, ok) in zip(live, pairs, strict=True):
        scores[i], correct[i] = s, ok
    return scores, correct, errors


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    m = mask.bool()
    v, r = values[m].double(), returns[m].double()
    if r.numel() < 2 or float(r.var()) == 0:
        return 0.0
    return float(1 - (r - v).var() / r.var())
