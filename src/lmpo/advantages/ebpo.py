"""EBPO: an empirical-Bayes shrinkage baseline for group sampling, arXiv 2602.05165."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from lmpo.advantages.base import (
    ADVANTAGES,
    Estimator,
    batch_std,
    check_scores,
    group_stats,
    summary,
)


@dataclass
class Welford:
    """Running count, mean and sum of squared deviations (population variance = m2/n).

    Batches merge with Chan et al.'s parallel update, which equals adding the
    values one at a time (Welford) up to rounding.
    """

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def update(self, values: torch.Tensor) -> None:
        x = values.detach().to(torch.float64).flatten()
        k = x.numel()
        if k == 0:
            return
        b_mean = float(x.mean())
        b_m2 = float(((x - b_mean) ** 2).sum())
        total = self.n + k
        d = b_mean - self.mean
        self.mean += d * k / total
        self.m2 += b_m2 + d * d * self.n * k / total
        self.n = total

    @property
    def var(self) -> float:
        return self.m2 / self.n if self.n else 0.0


@ADVANTAGES.register("ebpo")
class EBPO(Estimator):
    """Shrink each group's mean toward the global mean of everything seen so far.

        S_q   = (sigma2 / G_q) / (sigma2 / G_q + tau2)    (0 if both are 0)
        V_EB  = (1 - S_q) * group_mean_q + S_q * mu_glob
        A     = standardise_batch(r - V_EB)               (ddof=1, + eps)

    mu_glob and sigma2 are the running mean / population variance of every
    reward seen, tau2 the population variance of every group mean seen; both
    accumulators are updated with the current batch before use. A group in which
    every response failed still gets a negative advantage whenever mu_glob > 0.
    `standardize=False` (lmpo option) returns the raw r - V_EB.
    """

    def __init__(self, *, eps: float = 1e-6, standardize: bool = True):
        self.eps, self.standardize = eps, standardize
        self.rewards = Welford()
        self.group_means = Welford()

    def update(self, scores: torch.Tensor, group_ids: torch.Tensor) -> None:
        check_scores(scores, group_ids)
        self.rewards.update(scores)
        self.group_means.update(group_stats(scores, group_ids).mean)

    def shrinkage(self, groups) -> tuple[torch.Tensor, torch.Tensor]:
        """(S_q, V_EB_q) for each group from the current state.  # [Q], [Q]"""
        within = self.rewards.var / groups.size.to(torch.float64)
        denom = within + self.group_means.var
        shrink = torch.where(denom > 0, within / denom.clamp(min=1e-300), torch.zeros_like(within))
        return shrink, (1 - shrink) * groups.mean + shrink * self.rewards.mean

    def __call__(self, scores: torch.Tensor, group_ids: torch.Tensor):
        self.update(scores, group_ids)
        g = group_stats(scores, group_ids)
        shrink, baseline = self.shrinkage(g)
        adv = g.scores - baseline[g.index]
        if self.standardize:
            adv = (adv - adv.mean()) / (batch_std(adv) + self.eps)
        metrics = summary(adv, g) | {
            "ebpo/shrinkage": float(shrink.mean()),
            "ebpo/mu_glob": self.rewards.mean,
            "ebpo/sigma2": self.rewards.var,
            "ebpo/tau2": self.group_means.var,
        }
        return adv.to(scores.dtype), metrics

    def state_dict(self) -> dict:
        return {"rewards": asdict(self.rewards), "group_means": asdict(self.group_means)}

    def load_state_dict(self, state: dict) -> None:
        self.rewards = Welford(**state["rewards"])
        self.group_means = Welford(**state["group_means"])


def shrinkage_monte_carlo(group_size: int, *, prompts: int = 3000, batch_prompts: int = 16,
                          mu: float = 0.5, tau: float = 0.2, seed: int = 0) -> tuple[float, float]:
    """MSE against theta_q of V_EB and of the plain group mean, for
    theta_q ~ N(mu, tau^2) clipped to [0, 1] and rewards ~ Bernoulli(theta_q).

    V_EB is taken after each batch's update, as the estimator uses it.
    Returns (mse_eb, mse_group_mean).
    """
    gen = torch.Generator().manual_seed(seed)
    est = EBPO()
    err_eb, err_mean = 0.0, 0.0
    gid = torch.arange(batch_prompts).repeat_interleave(group_size)
    for _ in range(prompts // batch_prompts):
        theta = (mu + tau * torch.randn(batch_prompts, generator=gen, dtype=torch.float64))
        theta = theta.clamp(0, 1)
        rewards = torch.bernoulli(theta.repeat_interleave(group_size), generator=gen)
        est.update(rewards, gid)
        groups = group_stats(rewards, gid)
        _, v_eb = est.shrinkage(groups)
        err_eb += float(((v_eb - theta) ** 2).sum())
        err_mean += float(((groups.mean - theta) ** 2).sum())
    n = (prompts // batch_prompts) * batch_prompts
    return err_eb / n, err_mean / n
