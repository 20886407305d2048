"""EBPO: an empirical-Bayes shrinkage baseline for group sampling, arXiv 2602.05165.

Each prompt q has a latent success rate theta_q ~ N(mu, tau^2); its G_q rewards
scatter around theta_q with within-group variance sigma^2. From everything seen
so far (the current batch included, added first):

    mu_glob = running mean of every reward
    sigma2  = pooled within-group variance: sum over groups of sum_i (r - mean_q)^2,
              divided by the sum of (G_q - 1)                     (0 until that sum > 0)
    tau2    = max(0, population variance of group means - sigma2 * mean_q(1 / G_q))
    S_q     = (sigma2 / G_q) / (sigma2 / G_q + tau2)    (0 if sigma2 == 0; 1 if tau2 == 0)
    V_EB    = (1 - S_q) * mean_q + S_q * mu_glob
    A       = (r - V_EB) / (sqrt(var_all) + eps)          (scale="global"; "none": r - V_EB)

var_all is the running population variance of every reward. No batch mean is
subtracted: a group in which every response failed gets A = -S * mu_glob / scale < 0.
prior="cluster" keeps mu_glob and tau2 per cluster (tier) while sigma2 and var_all
stay pooled; decay in (0, 1) multiplies every accumulator by `decay` before each
update, so the prior follows a curriculum.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from lmpo.advantages.base import ADVANTAGES, Estimator, check_scores, group_stats, summary
from lmpo.welford import Welford

SCALES = ("global", "none")
PRIORS = ("global", "cluster")


@dataclass
class Prior:
    """The accumulators behind mu_glob and tau2 (one set, or one per cluster)."""

    rewards: Welford
    group_means: Welford
    inv_size: Welford  # mean of 1 / G_q over the groups seen

    @classmethod
    def empty(cls) -> Prior:
        return cls(Welford(), Welford(), Welford())

    def update(self, scores: torch.Tensor, means: torch.Tensor, sizes: torch.Tensor) -> None:
        self.rewards.update(scores)
        self.group_means.update(means)
        self.inv_size.update(1.0 / sizes.to(torch.float64))

    def decay(self, factor: float) -> None:
        for w in (self.rewards, self.group_means, self.inv_size):
            w.decay(factor)

    def tau2(self, sigma2: float) -> float:
        return max(0.0, self.group_means.var - sigma2 * self.inv_size.mean)

    def state_dict(self) -> dict:
        return {k: asdict(getattr(self, k)) for k in ("rewards", "group_means", "inv_size")}

    @classmethod
    def from_state(cls, state: dict) -> Prior:
        return cls(*(Welford(**state[k]) for k in ("rewards", "group_means", "inv_size")))


@ADVANTAGES.register("ebpo", wants_clusters=True, singleton="score", constant_groups="prior",
                     diagnostics=("ebpo/shrinkage", "ebpo/shrinkage_std", "ebpo/mu_glob",
                                  "ebpo/tau2", "grad/norm", "adv/allfail_frac",
                                  "adv/allfail_mean"),
                     twin={"advantage": {"name": "grpo"}},
                     readings=("ebpo/shrinkage", "ebpo/shrinkage_std"),
                     engagement="adv/allfail_mean",
                     # its mechanism: a group's baseline shrunk toward a prior leaves the
                     # group's advantages off zero mean (all-fail groups included)
                     mediates=("adv_abs_mean",),
                     domains={"eps": "[0, inf)", "scale": "{global, none}",
                              "prior": "{global, cluster}", "decay": "(0, 1) | None"},
                     title="EBPO", source="arXiv 2602.05165",
                     summary="empirical-Bayes shrinkage of each group's baseline toward the "
                             "running mean (pooled within-group variance, global scale)")
class EBPO(Estimator):
    """Empirical-Bayes baseline (see the module docstring); stateful, checkpointable."""

    def __init__(self, *, eps: float = 1e-6, scale: str = "global", prior: str = "global",
                 decay: float | None = None):
        if scale not in SCALES:
            raise ValueError(f"ebpo scale must be one of {SCALES}, got {scale!r}")
        if prior not in PRIORS:
            raise ValueError(f"ebpo prior must be one of {PRIORS}, got {prior!r}")
        if decay is not None and not 0 < decay < 1:
            raise ValueError(f"ebpo decay must be None or in (0, 1), got {decay}")
        self.eps, self.scale, self.prior, self.decay = eps, scale, prior, decay
        self.within_ss = 0.0  # sum over groups of sum_i (r - mean_q)^2
        self.within_df = 0.0  # sum over groups of (G_q - 1)
        self.pooled = Prior.empty()  # every reward and group: mu_glob, var_all, global tau2
        self.clusters: dict[str, Prior] = {}

    # ------------------------------------------------------------ statistics
    @property
    def sigma2(self) -> float:
        return self.within_ss / self.within_df if self.within_df > 0 else 0.0

    @property
    def mu_glob(self) -> float:
        return self.pooled.rewards.mean

    @property
    def var_all(self) -> float:
        return self.pooled.rewards.var

    @property
    def tau2(self) -> float:
        return self.pooled.tau2(self.sigma2)

    def _group_clusters(self, groups, clusters) -> list[str] | None:
        """The cluster of each group (every member must agree), or None."""
        if clusters is None:
            if self.prior == "cluster":
                raise ValueError("ebpo prior='cluster' needs clusters= (one name per sample)")
            return None
        if len(clusters) != len(groups.scores):
            raise ValueError(f"clusters has {len(clusters)} entries for {len(groups.scores)} "
                             "scores")
        out: list[str | None] = [None] * len(groups.size)
        for i, q in enumerate(groups.index.tolist()):
            c = str(clusters[i])
            if out[q] is not None and out[q] != c:
                raise ValueError(f"group {q} spans clusters {out[q]!r} and {c!r}")
            out[q] = c
        return out  # type: ignore[return-value]

    def update(self, scores: torch.Tensor, group_ids: torch.Tensor,
               clusters: list[str] | None = None) -> None:
        """Add a batch to every accumulator (after decaying them, if `decay` is set)."""
        check_scores(scores, group_ids)
        g = group_stats(scores, group_ids)
        self._update(g, self._group_clusters(g, clusters))

    def _update(self, g, group_clusters) -> None:
        if self.decay is not None:
            self.within_ss *= self.decay
            self.within_df *= self.decay
            self.pooled.decay(self.decay)
            for p in self.clusters.values():
                p.decay(self.decay)
        self.within_ss += float(((g.scores - g.mean[g.index]) ** 2).sum())
        self.within_df += float((g.size - 1).sum())
        self.pooled.update(g.scores, g.mean, g.size)
        if self.prior == "cluster":
            for c in dict.fromkeys(group_clusters):
                sel = torch.tensor([gc == c for gc in group_clusters])
                self.clusters.setdefault(c, Prior.empty()).update(
                    g.scores[sel[g.index]], g.mean[sel], g.size[sel])

    def shrinkage(self, g, group_clusters=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(S_q, V_EB_q) for each group of `g` from the current state.  # [Q], [Q]"""
        sigma2 = self.sigma2
        if self.prior == "cluster":
            priors = [self.clusters[c] for c in group_clusters]
        else:
            priors = [self.pooled] * len(g.size)
        mu = torch.tensor([p.rewards.mean for p in priors], dtype=torch.float64)
        tau2 = torch.tensor([p.tau2(sigma2) for p in priors], dtype=torch.float64)
        within = sigma2 / g.size.to(torch.float64)
        if sigma2 == 0:
            shrink = torch.zeros_like(within)
        else:
            shrink = within / (within + tau2)  # tau2 == 0 < sigma2 gives exactly 1
        return shrink, (1 - shrink) * g.mean + shrink * mu

    def __call__(self, scores: torch.Tensor, group_ids: torch.Tensor, *,
                 clusters: list[str] | None = None):
        check_scores(scores, group_ids)
        g = group_stats(scores, group_ids)
        group_clusters = self._group_clusters(g, clusters)
        self._update(g, group_clusters)
        shrink, baseline = self.shrinkage(g, group_clusters)
        adv = g.scores - baseline[g.index]
        scale = math.sqrt(self.var_all) + self.eps if self.scale == "global" else 1.0
        adv = adv / scale
        metrics = summary(adv, g, clusters) | {
            "ebpo/shrinkage": float(shrink.mean()),
            "ebpo/shrinkage_std": float(shrink.std(correction=0)),  # over the batch's groups
            "ebpo/mu_glob": self.mu_glob,
            "ebpo/sigma2": self.sigma2,
            "ebpo/tau2": self.tau2,
            "ebpo/scale": scale,
        }
        for c, p in self.clusters.items():
            metrics[f"ebpo/mu_glob/{c}"] = p.rewards.mean
            metrics[f"ebpo/tau2/{c}"] = p.tau2(self.sigma2)
        return adv.to(scores.dtype), metrics

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict:
        return {"within_ss": self.within_ss, "within_df": self.within_df,
                "pooled": self.pooled.state_dict(),
                "clusters": {c: p.state_dict() for c, p in self.clusters.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.within_ss, self.within_df = float(state["within_ss"]), float(state["within_df"])
        self.pooled = Prior.from_state(state["pooled"])
        self.clusters = {c: Prior.from_state(s) for c, s in state["clusters"].items()}


def oracle_shrinkage(theta: torch.Tensor, group_size: int) -> float:
    """S* = (sigma_w^2 / G) / (sigma_w^2 / G + tau^2) with sigma_w^2 = mean theta(1 - theta)
    and tau^2 = var theta (population) over the simulated thetas."""
    sigma_w2 = float((theta * (1 - theta)).mean())
    tau2 = float(theta.var(unbiased=False))
    return (sigma_w2 / group_size) / (sigma_w2 / group_size + tau2)


def shrinkage_monte_carlo(group_size: int, *, prompts: int = 3000, batch_prompts: int = 16,
                          mu: float = 0.5, tau: float = 0.2, seed: int = 0) -> dict[str, float]:
    """EBPO on simulated prompts: theta_q ~ N(mu, tau^2) clipped to [0, 1], rewards ~
    Bernoulli(theta_q), `batch_prompts` groups of `group_size` per batch.

    V_EB is taken after each batch's update, as the estimator uses it. Returns the
    MSE against theta_q of V_EB and of the plain group mean, the mean S over all
    batches, and the oracle S* over all simulated thetas.
    """
    gen = torch.Generator().manual_seed(seed)
    est = EBPO()
    err_eb, err_mean, shrinks, thetas = 0.0, 0.0, [], []
    gid = torch.arange(batch_prompts).repeat_interleave(group_size)
    for _ in range(prompts // batch_prompts):
        theta = (mu + tau * torch.randn(batch_prompts, generator=gen, dtype=torch.float64))
        theta = theta.clamp(0, 1)
        rewards = torch.bernoulli(theta.repeat_interleave(group_size), generator=gen)
        est.update(rewards, gid)
        groups = group_stats(rewards, gid)
        shrink, v_eb = est.shrinkage(groups)
        err_eb += float(((v_eb - theta) ** 2).sum())
        err_mean += float(((groups.mean - theta) ** 2).sum())
        shrinks.append(float(shrink.mean()))
        thetas.append(theta)
    n = (prompts // batch_prompts) * batch_prompts
    return {"mse_eb": err_eb / n, "mse_group_mean": err_mean / n,
            "mean_shrinkage": sum(shrinks) / len(shrinks),
            "oracle_shrinkage": oracle_shrinkage(torch.cat(thetas), group_size)}
