"""Pairwise preference data: JSONL pairs, and built-in pairs with a known true reward.

A pairs file has one JSON object per line: `prompt`, `chosen`, `rejected` (strings:
the prompt, and two completions of it) and an optional numeric `margin` (TRL's
column: how much `chosen` is preferred). A malformed line raises `DataError`
naming `file:line`.

The built-in pairs come from a built-in task under a hidden true preference
(`true_reward`): a correct answer beats a wrong one, and among correct answers the
shorter beats the longer. Candidates for each problem are the task's worked solution,
perturbations of it (a wrong final number, a missing answer, a repeated step) and,
when a policy is given, that policy's own samples, so the pairs cover what RL will
show the reward model. Each pair's margin is its true-reward difference.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

from lmpo.tasks import ANSWER_MARK, DataError, Problem
from lmpo.tasks.jsonl import jsonl_objects

LENGTH_SCALE = 64  # characters: the length at which a correct answer's brevity bonus is 0


@dataclass(frozen=True)
class Pair:
    prompt: str
    chosen: str
    rejected: str
    margin: float | None = None

    def to_json(self) -> dict:
        out = {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}
        return out | ({} if self.margin is None else {"margin": self.margin})


def load_pairs(path: str | Path) -> list[Pair]:
    """Every non-blank line becomes a Pair; a malformed line raises `DataError` (file:line)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such pairs file")
    pairs = []
    for where, obj in jsonl_objects(path, ("prompt", "chosen", "rejected")):
        for key in ("prompt", "chosen", "rejected"):
            if not isinstance(obj[key], str):
                raise DataError(f"{where}: field {key!r} must be a string, got "
                                f"{type(obj[key]).__name__}")
        margin = obj.get("margin")
        if margin is not None and (isinstance(margin, bool)
                                   or not isinstance(margin, int | float)):
            raise DataError(f"{where}: field 'margin' must be a number, got {margin!r}")
        pairs.append(Pair(obj["prompt"], obj["chosen"], obj["rejected"],
                          None if margin is None else float(margin)))
    if not pairs:
        raise DataError(f"{path}: no pairs (the file is empty)")
    return pairs


def write_pairs(pairs: list[Pair], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(p.to_json()) + "\n" for p in pairs), encoding="utf-8")
    return path


def true_reward(task, problem: Problem, completion: str) -> float:
    """The hidden preference of the built-in pairs: 0 for a wrong answer; a correct one
    scores 1 plus a brevity bonus in [0, 0.5], so correct beats wrong and, among correct
    answers, shorter beats longer."""
    if not task.is_correct(problem, completion):
        return 0.0
    return 1.0 + 0.5 * max(0.0, 1.0 - len(completion) / LENGTH_SCALE)


def perturbations(task, problem: Problem, rng: random.Random) -> list[str]:
    """The worked solution and edits of it: a wrong final number, no answer, a repeated
    step (correct but longer)."""
    solution = task.solution(problem)
    body, mark, answer = solution.rpartition(ANSWER_MARK)
    out = [solution]
    if mark:
        out.append(body)  # the working without an answer
        try:
            gold = Decimal(answer.replace(",", ""))
            delta = rng.choice([-10, -3, -2, -1, 1, 2, 3, 10])
            out.append(f"{body}{mark}{gold + delta}")
        except InvalidOperation:
            pass
        steps = body.split(",") if body else []
        if steps:
            longer = ",".join([*steps, steps[-1]])
            out.append(f"{longer}{mark}{answer}")
    return list(dict.fromkeys(out))


def pairs_for_problem(task, problem: Problem, candidates: list[str], per_problem: int,
                      rng: random.Random) -> list[Pair]:
    """Up to `per_problem` distinct pairs of candidates whose true rewards differ, the
    better one chosen; the margin is the true-reward difference."""
    scored = [(c, true_reward(task, problem, c)) for c in dict.fromkeys(candidates)]
    options = [(a, b) for i, a in enumerate(scored) for b in scored[i + 1:] if a[1] != b[1]]
    rng.shuffle(options)
    out = []
    for (a, ra), (b, rb) in options[:per_problem]:
        (win, rw), (lose, rl) = ((a, ra), (b, rb)) if ra > rb else ((b, rb), (a, ra))
        out.append(Pair(problem.prompt, win, lose, rw - rl))
    return out


def builtin_pairs(task, problems: list[Problem], *, per_problem: int, seed: int,
                  samples: dict[str, list[str]] | None = None) -> list[Pair]:
    """Pairs for `problems` from their perturbations plus `samples[prompt]` (a policy's
    completions, optional), under `true_reward`."""
    rng = random.Random(seed)
    out = []
    for p in problems:
        candidates = perturbations(task, p, rng) + list((samples or {}).get(p.prompt, []))
        out += pairs_for_problem(task, p, candidates, per_problem, rng)
    return out
