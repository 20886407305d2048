"""The reward both sides of `vs_trl.py` call: lmpo's `last_number`, in TRL's batch shape."""

from lmpo.rewards import last_number


def reward(prompts, completions, answers, **meta):
    return [last_number(c, a) for c, a in zip(completions, answers, strict=True)]
