"""A reward model's pair accuracy on chain-sum tiers it did not train on.

Pairs: for 40 problems of each of t2d1, t2d2 and t4d2 (nano-chain-sum-rm trains on t3d1
only), the worked solution against its wrong-final-number edit (`perturbations`), scored
by `ModelReward.raw_scores`, the scorer RL uses. Prints accuracy (the solution scored
higher) and the mean gap, per folder.

    lmpo rm --config nano-chain-sum-rm --out /tmp/rm          # ~3 min on 2 cores
    python experiments/rm_unseen_tiers.py /tmp/rm [more folders ...]

Used to check that moving reward-model training (76dc25b) and sharing its scorer and
moments (550a017) changed nothing (docs/reward-models.md): run `lmpo rm` with the code
before them (PYTHONPATH=<checkout of 40a0c67>/src) and after, compare the folders.
"""

from __future__ import annotations

import random
import sys

import torch

from lmpo.rewards.preferences import perturbations
from lmpo.rewards.reward_model import ModelReward
from lmpo.tasks import get_task

TIERS = ("t2d1", "t2d2", "t4d2")
PER_TIER = 40


def unseen_pairs(seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    task = get_task("chain_sum")
    rng = random.Random(seed)
    prompts, chosen, rejected = [], [], []
    for tier in TIERS:
        for problem in task.sample(PER_TIER, rng, cluster=tier):
            solution, _no_answer, wrong, *_ = perturbations(task, problem, rng)
            prompts.append(problem.prompt)
            chosen.append(solution)
            rejected.append(wrong)
    return prompts, chosen, rejected


class _Checker:  # ModelReward's checker: only its task is read here
    task = get_task("chain_sum")


def main(folders: list[str]) -> None:
    torch.set_num_threads(2)
    prompts, chosen, rejected = unseen_pairs()
    for folder in folders:
        rm = ModelReward(folder, _Checker(), micro_batch_size=64)
        gap = rm.raw_scores(prompts, chosen) - rm.raw_scores(prompts, rejected)
        print(f"{folder}: {len(gap)} pairs, accuracy {float((gap > 0).double().mean()):.3f}, "
              f"mean gap {float(gap.mean()):.3f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
