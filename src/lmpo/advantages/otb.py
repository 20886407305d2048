"""The optimal token baseline (OTB): a baseline per prompt group *and* per token position,
weighted by each response's accumulated path variance.

The trainer hands an estimator registered with `wants_paths` the path statistics of the
batch (`PathStats`): the log-probability of each sampled token and sum_v pi_v^2 at each
position, both from one no-gradient pass of the policy that sampled the batch in the
update's precision (verl's actor returns `old_log_probs` and `sum_pi_squared` from one
pass), and a rollout correction's token weights where the run has one. Its advantages are
per token ([B, T]), not one per sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmpo.advantages.base import ADVANTAGES, Estimator, Groups


@dataclass
class PathStats:
    """Per-token statistics of the sampling policy over a batch, all [B, T]."""

    logp: torch.Tensor  # log pi(sampled token)
    sum_sq: torch.Tensor  # sum_v pi_v^2
    mask: torch.Tensor  # 1 on response tokens
    is_weights: torch.Tensor | None = None  # a rollout correction's weights (None: none)

    def check(self, batch: int) -> None:
        shape = tuple(self.mask.shape)
        if len(shape) != 2 or shape[0] != batch:
            raise ValueError(f"paths.mask shape {shape} must be [B, T] with B = {batch}")
        for name in ("logp", "sum_sq", "is_weights"):
            x = getattr(self, name)
            if x is not None and tuple(x.shape) != shape:
                raise ValueError(f"paths.{name} shape {tuple(x.shape)} must equal the mask's "
                                 f"{shape}")


@ADVANTAGES.register("optimal_token_baseline", wants_paths=True, singleton="score",
                     domains={"handle_zero_tail": "bool", "epsilon": "(0, inf)"},
                     peer_names={"verl": "optimal_token_baseline"},
                     title="Optimal token baseline (OTB)",
                     source="verl compute_optimal_token_baseline_advantage "
                            "(algorithm.adv_estimator=optimal_token_baseline)",
                     summary="per token: the return less the group's path-variance-weighted "
                             "mean return at that position")
class OptimalTokenBaseline(Estimator):
    """A_{i,t} = G_i - B_t(group of i), with G_i the response's return (its score, on
    every token up to its last) and

        B_t = sum_j G_j W_{j,t} / (sum_j W_{j,t} + epsilon),  W_{j,t} = sum_{s<=t} w_{j,s},
        w_{j,s} = (1 - 2 pi_{j,s} + sum_v pi_v^2) * rho_{j,s}^2,

    the sums over the group's responses still running at t; w is ||e_a - pi||^2, the
    squared norm of the log-probability's gradient with respect to the logits (rho: a
    rollout correction's token weight, 1 without one). A group of one has no baseline
    (A = G). With `handle_zero_tail`, the part of a group's single longest response past
    its second-longest gets no baseline (verl's default). Equal to verl's function
    (tests/test_verl_peers.py)."""

    def __init__(self, *, handle_zero_tail: bool = True, epsilon: float = 1e-8):
        self.handle_zero_tail, self.epsilon = handle_zero_tail, epsilon

    def compute(self, g: Groups) -> torch.Tensor:
        p = g.paths
        if p is None:
            raise ValueError("the optimal_token_baseline estimator needs the batch's path "
                             "statistics: call it with paths=PathStats(logp, sum_sq, mask) "
                             "(the trainer computes them)")
        mask = p.mask.to(torch.float64)
        w = 1 - 2 * p.logp.to(torch.float64).exp() + p.sum_sq.to(torch.float64)
        if p.is_weights is not None:
            w = w * p.is_weights.to(torch.float64) ** 2
        cum = (w * mask).cumsum(-1)  # W_{i,t}
        ret = g.scores[:, None] * last_and_before(mask)  # reward-to-go of an outcome score
        q, t = len(g.size), mask.shape[1]
        num = torch.zeros(q, t, dtype=torch.float64).index_add_(0, g.index, ret * cum * mask)
        den = torch.zeros(q, t, dtype=torch.float64).index_add_(0, g.index, cum * mask)
        base = (num / (den + self.epsilon))[g.index]
        base = torch.where((g.size > 1)[g.index][:, None], base, torch.zeros_like(base))
        if self.handle_zero_tail:
            lengths = mask.sum(-1)
            for group in range(q):
                rows = (g.index == group).nonzero().flatten()
                if len(rows) < 2:
                    continue
                top, second = torch.topk(lengths[rows], 2).values.tolist()
                if top > second:  # one longest response: no baseline past the second's end
                    base[rows[lengths[rows] == top], int(second):] = 0.0
        return (ret - base) * mask


def last_and_before(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] 1 at every position up to each row's last response token (the positions an
    outcome reward placed on that token reaches by reward-to-go), 0 after."""
    t = mask.shape[1]
    steps = torch.arange(1, t + 1, dtype=torch.long, device=mask.device)
    last = (mask.long() * steps).amax(-1)  # 1-based position of the last token, 0 if none
    return (steps[None, :] <= last[:, None]).to(mask.dtype)
