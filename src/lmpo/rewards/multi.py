"""Several reward functions per sample (`reward.extra`, `reward.weights`), as TRL's
`reward_funcs` with `reward_weights`.

The first function is the run's `reward.fn`, the checker: it alone decides accuracy, and
`reward.scale` maps its scores. Every further function in `reward.extra` is a built-in
(`exact`, `last_number`, `math_verify`, `answer_format`) or `path/to/file.py:function`
in TRL's shape, scored raw. A sample's score is the weighted sum of its functions' scores
(TRL's default `multi_objective_aggregation="sum_then_normalize"`: every estimator then
normalises the sum). A function that returns None for a sample does not apply to it: it
adds nothing to the sum (TRL's `nansum`); a sample no function scores is dropped.

Each score is a `Score`: a float (the weighted sum) that also carries its per-function
scores (`parts`, NaN where a function returned None), so that an estimator which
normalises every function on its own (GDPO, `advantage.name: gdpo`, TRL's
"normalize_then_sum") can read them. Every function's mean over the training samples is
logged as `reward/fn/<name>_mean`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from lmpo.errors import ConfigError


class Score(float):
    """A sample's score (a float) with annotations the group estimators may read:
    `parts` and `weights` (its reward functions' scores, NaN where one gave None, and
    their weights: the float is sum_k w_k parts_k over the present parts) and `baseline`
    (the score of its prompt's greedy response, where an estimator asks for one: ReMax).
    An annotation not given is kept from `value` when that is a Score."""

    parts: tuple[float, ...] | None = None
    weights: tuple[float, ...] | None = None
    baseline: float | None = None

    @classmethod
    def of(cls, value: float, *, parts=None, weights=None, baseline=None) -> Score:
        out = cls(value)
        out.parts, out.weights, out.baseline = (
            getattr(value, "parts", None), getattr(value, "weights", None),
            getattr(value, "baseline", None))
        if parts is not None:
            out.parts, out.weights = tuple(map(float, parts)), tuple(map(float, weights))
        if baseline is not None:
            out.baseline = float(baseline)
        return out


def fn_name(spec: str) -> str:
    """The name a reward function's metrics carry: a built-in's name, or a user function's."""
    return spec.rpartition(":")[2] if ":" in spec else spec


def weighted_sum(values: Sequence[float | None], weights: Sequence[float]) -> float | None:
    """sum_k w_k s_k over the functions that scored the sample (None adds nothing); None when
    none did."""
    known = [(w, s) for w, s in zip(weights, values, strict=True) if s is not None]
    if not known:
        return None
    return math.fsum(w * s for w, s in known)


class MultiReward:
    """`Reward`'s interface over several functions (see the module docstring)."""

    def __init__(self, rewards: list, weights: Sequence[float]):
        if len(rewards) != len(weights):
            raise ConfigError(f"reward.weights has {len(weights)} entries for {len(rewards)} "
                              "reward functions (reward.fn, then each of reward.extra)")
        names = [fn_name(r.spec) for r in rewards]
        if len(set(names)) != len(names):
            raise ConfigError(f"reward functions must have distinct names, got {names}")
        self.rewards, self.weights, self.names = list(rewards), [float(w) for w in weights], names
        self.checker = rewards[0]
        self.spec, self.task = " + ".join(r.spec for r in rewards), self.checker.task
        self._sums: dict[str, list[float]] = {}

    def score(self, problems, completions, *, where: str = "sample", index=None,
              train: bool = False) -> tuple[list[Score | None], list[bool]]:
        scored = [r.score(problems, completions, where=where, index=index, train=train)
                  for r in self.rewards]
        columns, correct = [got for got, _ in scored], scored[0][1]  # the checker's
        out: list[Score | None] = []
        for values in zip(*columns, strict=True):
            total = weighted_sum(values, self.weights)
            parts = [math.nan if v is None else v for v in values]
            out.append(None if total is None
                       else Score.of(total, parts=parts, weights=self.weights))
        if train:
            for name, column in zip(self.names, columns, strict=True):
                known = [v for v in column if v is not None]
                acc = self._sums.setdefault(name, [0.0, 0])
                acc[0] += math.fsum(known)
                acc[1] += len(known)
        return out, list(correct)

    def pop_metrics(self) -> dict[str, float]:
        """reward/fn/<name>_mean: each function's mean over the training samples it scored
        since the last call."""
        sums, self._sums = self._sums, {}
        return {f"reward/fn/{k}_mean": s / n for k, (s, n) in sums.items() if n}


def score_parts(scores: Sequence[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, K] float64 each score's per-function parts, [K] their weights). Without
    several functions, K = 1: the scores themselves, weight 1. A score without parts in a
    run with several (one the rollout controller set for a stopped response, or 0 for a
    reward that raised under `scorer_errors: zero`) counts as the checker's score with
    every other function absent (NaN)."""
    weights = next((s.weights for s in scores if getattr(s, "parts", None) is not None), (1.0,))
    width, rows = len(weights), []
    for s in scores:
        parts = getattr(s, "parts", None)
        rows.append((float(s),) + (math.nan,) * (width - 1) if parts is None else parts)
    return (torch.tensor(rows, dtype=torch.float64).reshape(len(rows), width),
            torch.tensor(weights, dtype=torch.float64))
