"""Critic-free group baselines: GRPO (three scalings), Dr. GRPO and RLOO."""

from __future__ import annotations

import torch

from lmpo.advantages.base import ADVANTAGES, Estimator, Groups, batch_std

SCALES = ("group", "batch", "none")


@ADVANTAGES.register("grpo", domains={"scale": "{group, batch, none}", "eps": "[0, inf)"},
                     peer_keys={"trl": {"scale": "scale_rewards"}},  # TRL's names are lmpo's
                     title="GRPO", source="arXiv 2402.03300",
                     summary="group-relative advantages, std-scaled per group (or batch)")
class GRPO(Estimator):
    """A = (s - group_mean) / (std + eps); std of the group ("group", GRPO), of all
    scores in the batch ("batch") or no division ("none", Dr. GRPO).
    Unbiased std (ddof=1). A group of one response gets A = 0."""

    def __init__(self, *, scale: str = "group", eps: float = 1e-6):
        if scale not in SCALES:
            raise ValueError(f"grpo scale must be one of {SCALES}, got {scale!r}")
        self.scale, self.eps = scale, eps

    def compute(self, g: Groups) -> torch.Tensor:
        centred = torch.where(g.size[g.index] > 1, g.scores - g.mean[g.index],
                              torch.zeros_like(g.scores))
        if self.scale == "none":
            return centred
        if self.scale == "group":
            denom = g.std[g.index] + self.eps
        else:
            denom = (batch_std(g.scores) + self.eps).expand_as(centred)
        # a zero denominator (eps=0, equal scores) has a zero numerator: A = 0, not NaN
        return torch.where(denom > 0, centred / denom.clamp(min=1e-300), torch.zeros_like(centred))


@ADVANTAGES.register("dr_grpo", title="Dr. GRPO", source="arXiv 2503.20783",
                     summary="group mean-centred advantages, no std division")
class DrGRPO(GRPO):
    """Dr. GRPO: group mean-centred scores, no std division."""

    def __init__(self):
        super().__init__(scale="none")


@ADVANTAGES.register("rloo", title="RLOO", source="arXiv 2402.14740",
                     summary="leave-one-out group baseline")
class RLOO(Estimator):
    """REINFORCE leave-one-out: A_i = s_i - mean of the other responses of its group
    (= n/(n-1) * (s_i - group_mean)). A group of one gets A = 0."""

    def __init__(self):
        pass

    def compute(self, g: Groups) -> torch.Tensor:
        n = g.size[g.index].to(torch.float64)
        loo = n / (n - 1).clamp(min=1) * (g.scores - g.mean[g.index])
        return torch.where(n > 1, loo, torch.zeros_like(loo))
