"""Any reasoning-gym dataset as a task: `task: rg:<dataset>` with `task_params`.

`task_params` holds the dataset's own parameters; an optional `tiers` mapping
names difficulty tiers (the curriculum's clusters), each with parameters that
override the common ones:

    task: rg:basic_arithmetic
    task_params:
      min_terms: 2
      max_terms: 2
      tiers:
        d1: {min_digits: 1, max_digits: 1}
        d2: {min_digits: 2, max_digits: 2}

The prompt is the dataset's question as reasoning-gym writes it, the gold answer
its `answer`. The task's scorer is the dataset's own `score_answer`, given the
text inside `<answer>...</answer>` when the completion has such a tag, else the
whole stripped completion; `is_correct` is a score of 1. Chat models that answer
in a sentence are better scored by `reward.fn: last_number` or `math_verify`.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

from lmpo.errors import ConfigError, UnknownName
from lmpo.registry import nearest
from lmpo.tasks.base import Problem

# reasoning-gym imports cellpylib, whose sources compile with SyntaxWarnings ("is" with a
# literal) wherever no bytecode is cached (a fresh install, PYTHONDONTWRITEBYTECODE): eight
# lines on every command that are not lmpo's to print
with warnings.catch_warnings():
    warnings.simplefilter("ignore", SyntaxWarning)
    import reasoning_gym
    from reasoning_gym.utils import extract_answer as extract_tagged

PREFIX = "rg:"
DEFAULT_TIER = "default"


def dataset_names() -> list[str]:
    return sorted(reasoning_gym.factory.DATASETS)


class ReasoningGymTask:
    """A reasoning-gym dataset, with optional tiers (see the module docstring)."""

    def __init__(self, dataset: str, params: dict[str, Any] | None = None):
        names = dataset_names()
        if dataset not in names:
            raise ConfigError(f"task rg:{dataset}: unknown reasoning-gym dataset"
                              f"{nearest(dataset, names)}; {len(names)} datasets, e.g. "
                              f"{', '.join(names[:8])} ... (reasoning_gym.factory.DATASETS)")
        params = dict(params or {})
        tiers = params.pop("tiers", None) or {DEFAULT_TIER: {}}
        if not isinstance(tiers, dict) or not all(isinstance(v, dict) for v in tiers.values()):
            raise ConfigError("task_params.tiers must map each tier name to a mapping of "
                              "dataset parameters")
        self.name = f"{PREFIX}{dataset}"
        self.dataset = dataset
        self.params = {str(k): params | v for k, v in tiers.items()}
        self.clusters = list(self.params)
        self._scorers: dict[str, Any] = {}
        for tier in self.clusters:  # a bad parameter fails now, naming the tier
            self._generate(tier, 1, 0)

    def _generate(self, tier: str, n: int, seed: int) -> list[dict]:
        try:
            ds = reasoning_gym.create_dataset(self.dataset, size=n, seed=seed,
                                              **self.params[tier])
        except (TypeError, ValueError, AssertionError) as exc:
            raise ConfigError(f"task {self.name} tier {tier!r}: reasoning-gym rejected the "
                              f"parameters {self.params[tier]}: {exc}") from None
        self._scorers.setdefault(tier, ds)
        return [ds[i] for i in range(n)]

    def draw_key(self, tier: str) -> tuple:
        """What this task's draws from `tier` depend on (lmpo.tasks.heldout memoises its
        probe by it): the class that turns entries into problems, the dataset, the tier's
        parameters."""
        cls = type(self)
        return (cls.__module__, cls.__qualname__, self.dataset, tier,
                repr(sorted(self.params[tier].items())))

    def sample(self, n: int, rng: random.Random, cluster: str | None = None) -> list[Problem]:
        if cluster is not None and cluster not in self.params:
            raise UnknownName(f"unknown tier {cluster!r}{nearest(cluster, self.clusters)} for task "
                           f"{self.name}; tiers: {', '.join(self.clusters)}")
        names = [cluster] * n if cluster else [rng.choice(self.clusters) for _ in range(n)]
        pools = {name: iter(self._generate(name, names.count(name), rng.randrange(2**31)))
                 for name in dict.fromkeys(names)}
        return [self._to_problem(next(pools[name]), name) for name in names]

    def _to_problem(self, entry: dict, tier: str) -> Problem:
        return Problem(prompt=str(entry["question"]), answer=str(entry["answer"]),
                       cluster=tier, meta={"entry": entry})

    def solution(self, problem: Problem) -> str:
        return problem.answer

    def answer_text(self, completion: str) -> str | None:
        """What the dataset's checker reads: the `<answer>` tag's text, else everything."""
        tagged = extract_tagged(completion)
        return tagged if tagged is not None else completion.strip()

    def score(self, problem: Problem, completion: str) -> float:
        answer = self.answer_text(completion)
        if not answer:
            return 0.0
        try:
            return float(self._scorers[problem.cluster].score_answer(answer,
                                                                      problem.meta["entry"]))
        except Exception:  # the dataset's checker choking on malformed text scores 0
            return 0.0

    def is_correct(self, problem: Problem, completion: str) -> bool:
        return self.score(problem, completion) >= 1.0
