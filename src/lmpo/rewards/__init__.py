"""Reward functions: the task's own scorer, built-in checkers, or a user function.

`build_reward(spec, task)` returns a `Reward`; the trainer and the evaluator call
`Reward.score(problems, completions)` once per batch (TRL's shape underneath).
"""

from lmpo.rewards.base import (
    MAX_ABS_REWARD,
    REWARD_FNS,
    SCALES,
    Reward,
    RewardError,
    build_reward,
    exact_match,
    last_number,
    reward_range,
)
from lmpo.rewards.guarded import GuardedWorker

__all__ = ["MAX_ABS_REWARD", "REWARD_FNS", "SCALES", "GuardedWorker", "Reward", "RewardError",
           "build_reward", "exact_match", "last_number", "reward_range"]
