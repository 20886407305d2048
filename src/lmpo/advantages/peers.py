"""The engines' critic-free estimators lmpo also ships: REINFORCE++ (and its group
baseline), OPO, GPG, Pass@k (verl's grpo_passk), MaxRL (SkyRL's maxrl) and the raw
reward (NeMo-RL's RawRewardAdvantageEstimator).

Each is written from its formula and checked against the engine's own function
(tests/test_verl_peers.py, tests/test_peer_estimators.py). Token-level whitening
(REINFORCE++) counts each response once per token, as verl's masked_whiten does over the
response mask, so those estimators need each response's length (`wants_lengths`).
"""

from __future__ import annotations

import torch

from lmpo.advantages.base import ADVANTAGES, Estimator, Groups

VERL_EPS = 1e-8  # verl's masked_mean / masked_whiten constants, kept to match them


def _needs_lengths(g: Groups, name: str) -> torch.Tensor:
    if g.lengths is None:
        raise ValueError(f"the {name} estimator needs each response's length: call it with "
                         "lengths=[B] token counts")
    return g.lengths


def token_whiten(x: torch.Tensor, lengths: torch.Tensor, *, nemo_rl: bool = False
                 ) -> torch.Tensor:
    """The whitening of a per-token tensor that is constant along each response, mu and var
    over tokens (x_i counted n_i times). verl's masked_whiten (default): (x - mu) /
    sqrt(var + 1e-8), the unbiased var (N / (N - 1), N tokens), both means divided by
    (N + 1e-8), a response of no tokens 0. NeMo-RL's normalize_advantages (`nemo_rl`):
    (x - mu) / sqrt(max(var, 1e-8)), the population var, both means divided by max(N, 1),
    every response whitened."""
    n_tok = lengths.sum()
    total = n_tok.clamp(min=1) if nemo_rl else n_tok + VERL_EPS
    mu = (lengths * x).sum() / total
    var = (lengths * (x - mu) ** 2).sum() / total
    if nemo_rl:
        return (x - mu) * torch.rsqrt(var.clamp(min=1e-8))
    var = var * n_tok / (n_tok - 1) if n_tok > 1 else var
    out = (x - mu) * torch.rsqrt(var + VERL_EPS)
    return torch.where(lengths > 0, out, torch.zeros_like(out))


def _centred(g: Groups) -> torch.Tensor:
    """s - group mean, where a group of one keeps its score (verl's and SkyRL's baseline 0)."""
    return torch.where(g.size[g.index] > 1, g.scores - g.mean[g.index], g.scores)


@ADVANTAGES.register("reinforce_plus_plus", singleton="score", constant_groups="batch",
                     wants_lengths=True, whitens=True,
                     domains={"gamma": "[1, 1]"},
                     peer_keys={"verl": {"gamma": "gamma"}},
                     title="REINFORCE++", source="arXiv 2501.03262",
                     summary="the return whitened over every token of the batch (no baseline)")
class ReinforcePlusPlus(Estimator):
    """A_t = whiten(return_t) over all valid tokens of the batch (verl's
    `compute_reinforce_plus_plus_outcome_advantage`). With an outcome reward and gamma = 1
    (verl's default `algorithm.gamma`) every token's return is the response's score, so A
    is per response. A discount gamma < 1 would give per-token advantages, which lmpo's
    group family does not carry: gamma is fixed at 1 (a domain, so other values fail)."""

    def __init__(self, *, gamma: float = 1.0):
        self.gamma = gamma

    def compute(self, g: Groups) -> torch.Tensor:
        return token_whiten(g.scores, _needs_lengths(g, "reinforce_plus_plus"))


@ADVANTAGES.register("reinforce_plus_plus_baseline", singleton="score", wants_lengths=True,
                     whitens=True,
                     title="REINFORCE++ with a group baseline", source="arXiv 2501.03262",
                     summary="group mean-centred scores, whitened over every token of the "
                             "batch")
class ReinforcePlusPlusBaseline(Estimator):
    """A = whiten(s - group mean) over all valid tokens of the batch (verl's
    `compute_reinforce_plus_plus_baseline_outcome_advantage`; a group of one has baseline
    0: its score itself is whitened)."""

    def compute(self, g: Groups) -> torch.Tensor:
        return token_whiten(_centred(g), _needs_lengths(g, "reinforce_plus_plus_baseline"))


@ADVANTAGES.register("opo", singleton="score", wants_lengths=True,
                     title="OPO (on-policy RL, optimal baseline)",
                     source="arXiv 2505.23585",
                     summary="scores minus the group's length-weighted mean score")
class OPO(Estimator):
    """A_i = s_i - sum_j n_j s_j / sum_j n_j over the group (n: response lengths; verl's
    `compute_opo_outcome_advantage`; a group of one has baseline 0)."""

    def compute(self, g: Groups) -> torch.Tensor:
        n = _needs_lengths(g, "opo")
        q = len(g.size)
        num = torch.zeros(q, dtype=torch.float64).index_add_(0, g.index, n * g.scores)
        den = torch.zeros(q, dtype=torch.float64).index_add_(0, g.index, n)
        base = num / den  # a group's total length is > 0 wherever it has a token
        return torch.where(g.size[g.index] > 1, g.scores - base[g.index], g.scores)


@ADVANTAGES.register("gpg", singleton="score", domains={"f_norm": "[0.001, inf)"}, title="GPG",
                     source="arXiv 2504.02546",
                     summary="group mean-centred scores times B / (samples with a non-zero "
                             "score)")
class GPG(Estimator):
    """A_i = alpha (s_i - group mean) / f_norm, alpha = B / max(1, #{s != 0}) over the batch
    (verl's `compute_gpg_outcome_advantage`: the share of samples with a signal rescales
    every advantage; a group of one has baseline 0)."""

    def __init__(self, *, f_norm: float = 1.0):
        self.f_norm = f_norm

    def compute(self, g: Groups) -> torch.Tensor:
        alpha = len(g.scores) / max(int((g.scores != 0).sum()), 1)
        return alpha * _centred(g) / self.f_norm


@ADVANTAGES.register("grpo_passk", min_group=2,
                     domains={"norm_adv_by_std": "bool", "eps": "[0, inf)"},
                     peer_keys={"verl": {"norm_adv_by_std": "norm_adv_by_std_in_grpo"}},
                     title="Pass@k training", source="arXiv 2503.19595",
                     summary="only the group's best response gets an advantage: best minus "
                             "second best (std-scaled)")
class GRPOPassK(Estimator):
    """In each group (>= 2 responses), the best response gets (r_max - r_second) /
    (std + eps) (std-scaled if norm_adv_by_std: verl's norm_adv_by_std_in_grpo; unbiased
    std), every other response 0 (verl's `compute_grpo_passk_outcome_advantage`; the best is
    chosen by torch.topk over the group in batch order, as verl does, so ties pick the same
    response)."""

    def __init__(self, *, norm_adv_by_std: bool = True, eps: float = 1e-6):
        self.norm_adv_by_std, self.eps = norm_adv_by_std, eps

    def compute(self, g: Groups) -> torch.Tensor:
        adv = torch.zeros_like(g.scores)
        for q in range(len(g.size)):
            members = torch.nonzero(g.index == q).flatten()
            if len(members) < 2:
                raise ValueError(f"grpo_passk needs at least 2 responses per group; group "
                                 f"{q} has {len(members)}")
            rewards = g.scores[members]
            top, where = torch.topk(rewards, 2)
            value = top[0] - top[1]
            if self.norm_adv_by_std:
                value = value / (torch.std(rewards) + self.eps)
            adv[members[where[0]]] = value
        return adv


@ADVANTAGES.register("maxrl", singleton="score", domains={"eps": "[0, inf)"},
                     title="MaxRL (maximum-likelihood RL)", source="arXiv 2602.02710",
                     summary="group mean-centred scores divided by the group mean (1/p "
                             "reweighting of hard prompts)")
class MaxRL(Estimator):
    """A_i = (s_i - mean) / (mean + eps) in groups of two or more; a group of one keeps its
    score (SkyRL's `compute_maxrl_advantage`). On {0, 1} rewards the mean is the prompt's
    pass rate p, so a correct response gets (1 - p) / p: hard prompts weigh more. SkyRL
    does not guard the mean: an all-zero group gets 0, and on rewards that can average
    below 0 (e.g. {-1, +1}) the sign flips; use {0, 1} rewards."""

    def __init__(self, *, eps: float = 1e-6):
        self.eps = eps

    def compute(self, g: Groups) -> torch.Tensor:
        mean = g.mean[g.index]
        return torch.where(g.size[g.index] > 1, (g.scores - mean) / (mean + self.eps),
                           g.scores)


@ADVANTAGES.register("raw_reward", singleton="score", constant_groups="none", wants_lengths=True,
                     domains={"normalize": "bool"},
                     peer_names={"nemo_rl": "RawRewardAdvantageEstimator"},
                     title="Raw reward (no baseline)",
                     source="NeMo-RL RawRewardAdvantageEstimator (normalize_advantages)",
                     summary="the score itself; with normalize, whitened over the batch's "
                             "tokens")
class RawReward(Estimator):
    """A = s: no value model, no baseline (NeMo-RL's `RawRewardAdvantageEstimator`). With
    `normalize` (its `normalize_advantages`), whitened over every valid token of the batch
    by NeMo-RL's convention (`token_whiten`: the population variance, clamped)."""

    def __init__(self, *, normalize: bool = False):
        self.normalize = normalize

    def compute(self, g: Groups) -> torch.Tensor:
        if not self.normalize:
            return g.scores.clone()
        return token_whiten(g.scores, _needs_lengths(g, "raw_reward"), nemo_rl=True)
