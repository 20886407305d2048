"""The task interface: problems with a gold answer and a cluster (difficulty tier)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Protocol

ANSWER_MARK = "#"


@dataclass(frozen=True)
class Problem:
    prompt: str  # text the policy continues, e.g. "12+7-3="
    answer: str  # gold final answer, e.g. "16"
    cluster: str = "default"  # difficulty tier / topic: the curriculum samplers' unit
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


class Task(Protocol):
    name: str
    clusters: list[str]  # ordered easy -> hard

    def sample(self, n: int, rng: random.Random, cluster: str | None = None) -> list[Problem]:
        """`n` problems (from `cluster`, or spread over all clusters)."""

    def score(self, problem: Problem, completion: str) -> float:
        """Reward in [0, 1] (may be partial credit); malformed completions score 0 and
        never raise."""

    def is_correct(self, problem: Problem, completion: str) -> bool:
        """Exact correctness (what `accuracy` counts); never partial, never raises."""

    def solution(self, problem: Problem) -> str:
        """A worked completion (for supervised warm-starting)."""


def extract_answer(completion: str) -> str | None:
    """The text after the last answer mark, up to the end of its line; None if absent."""
    if ANSWER_MARK not in completion:
        return None
    tail = completion.rsplit(ANSWER_MARK, 1)[1]
    return tail.split("\n", 1)[0].strip()
