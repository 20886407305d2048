"""Estimators that need more of the rollout than one score per sample: ReMax (a greedy
response per prompt as the baseline) and GDPO (several reward functions, each
normalised on its own).

The trainer hands them what their registry metadata asks for: `wants_baselines` (the
score of each prompt's greedy response, decoded and scored beside the sampled group and
counted in the rollout's tokens: `lmpo.trainer.greedy`) and `wants_parts` (each reward
function's score and weight: `reward.extra`, `lmpo.rewards.multi`).
"""

from __future__ import annotations

import torch

from lmpo.advantages.base import ADVANTAGES, Estimator, Groups, batch_std


@ADVANTAGES.register("remax", wants_baselines=True, singleton="score", peer_names={"verl": "remax"},
                     title="ReMax", source="arXiv 2310.10505",
                     summary="score minus the score of the prompt's greedy response")
class ReMax(Estimator):
    """A_i = s_i - s(greedy response to i's prompt) (verl's `compute_remax_outcome_advantage`
    with an outcome reward: every token's return is the score, less the baseline). The
    greedy response is decoded from the policy that sampled the group, at temperature 0,
    and scored by the same reward."""

    def compute(self, g: Groups) -> torch.Tensor:
        if g.baselines is None:
            raise ValueError("the remax estimator needs each sample's greedy baseline score: "
                             "call it with baselines=[B] (the trainer decodes them)")
        return g.scores - g.baselines


def _group_nan_stats(x: torch.Tensor, g: Groups) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group and column of x [B, K] (NaN = absent): the mean and the unbiased std over
    the present entries (NaN where fewer than two are present), as TRL's nanmean/nanstd."""
    q, k = len(g.size), x.shape[1]
    present = ~torch.isnan(x)
    count = torch.zeros(q, k, dtype=torch.float64).index_add_(0, g.index, present.double())
    total = torch.zeros(q, k, dtype=torch.float64).index_add_(
        0, g.index, torch.where(present, x, torch.zeros_like(x)))
    mean = total / count  # NaN where a group has no entry
    dev = torch.where(present, x - mean[g.index], torch.zeros_like(x))
    sq = torch.zeros(q, k, dtype=torch.float64).index_add_(0, g.index, dev ** 2)
    std = torch.where(count > 1, torch.sqrt(sq / (count - 1).clamp(min=1)),
                      torch.full_like(sq, torch.nan))
    return mean, std


@ADVANTAGES.register("gdpo", wants_parts=True, domains={"eps": "(0, inf)"},
                     preset_keys=("reward.extra",),  # the preset pairs two rewards
                     title="GDPO (group reward-decoupled normalisation)",
                     source="arXiv 2601.05242; TRL multi_objective_aggregation="
                            "\"normalize_then_sum\"",
                     summary="each reward function normalised within its group, weighted "
                             "sum, whitened over the batch")
class GDPO(Estimator):
    """With K reward functions (`reward.extra`): each function's scores are normalised
    within the group, (r_k - mean_k) / (std_k + eps) (unbiased std; a function that scores
    fewer than two of a group's samples adds nothing there), summed with the functions'
    weights, and the sums whitened over the batch: A = (R - mean R) / (std R + eps), as
    TRL's `multi_objective_aggregation="normalize_then_sum"` does (eps 1e-4, TRL's
    constant). With one function this is GRPO's group normalisation followed by a batch
    whitening. Unlike summing first, a function with a small spread (a format reward most
    samples pass) is not drowned by one with a large one."""

    def __init__(self, *, eps: float = 1e-4):
        self.eps = eps

    def compute(self, g: Groups) -> torch.Tensor:
        parts = g.scores[:, None] if g.parts is None else g.parts
        weights = torch.ones(parts.shape[1], dtype=torch.float64) if g.weights is None \
            else g.weights
        mean, std = _group_nan_stats(parts, g)
        normed = (parts - mean[g.index]) / (std[g.index] + self.eps)  # NaN: adds nothing
        total = torch.nansum(normed * weights, dim=1)
        return (total - total.mean()) / (batch_std(total) + self.eps) if len(total) \
            else total
