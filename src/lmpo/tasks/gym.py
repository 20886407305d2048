"""reasoning-gym arithmetic tasks in a compact worked format a tiny model can learn.

A chain sum `12 + 7 - 3` becomes the prompt `12+7-3=` and the worked solution
`19,16#16`: the running result after each operation, then `#` and the answer.
Problems and gold answers come from reasoning-gym's seeded generators and every
completion is scored by the dataset's own `score_answer` on the text after `#`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

import reasoning_gym

from lmpo.registry import nearest
from lmpo.tasks.base import ANSWER_MARK, Problem, extract_answer


@dataclass(frozen=True)
class Tier:
    name: str
    terms: int
    digits: int


CHAIN_SUM_TIERS = (Tier("t2d1", 2, 1), Tier("t3d1", 3, 1), Tier("t2d2", 2, 2),
                   Tier("t4d2", 4, 2))
PRODUCT_TIERS = (Tier("t2d1", 2, 1), Tier("t3d1", 3, 1), Tier("t2d2", 2, 2))


def _partial_results(tokens: list[str]) -> list[int]:
    """Left-to-right running values of `a op b op c ...` (ops + - *)."""
    acc = int(tokens[0])
    out = []
    for op, num in zip(tokens[1::2], tokens[2::2], strict=True):
        n = int(num)
        acc = acc + n if op == "+" else acc - n if op == "-" else acc * n
        out.append(acc)
    return out


class GymArithmeticTask:
    """A reasoning-gym arithmetic dataset (`chain_sum`, `products`) with difficulty tiers."""

    def __init__(self, dataset: str, tiers: tuple[Tier, ...]):
        self.name = dataset
        self.dataset = dataset
        self.tiers = {t.name: t for t in tiers}
        self.clusters = [t.name for t in tiers]
        self._scorers: dict[str, object] = {}

    def _generate(self, tier: Tier, n: int, seed: int):
        ds = reasoning_gym.create_dataset(
            self.dataset, size=n, seed=seed, min_terms=tier.terms, max_terms=tier.terms,
            min_digits=tier.digits, max_digits=tier.digits,
        )
        self._scorers.setdefault(tier.name, ds)
        return [ds[i] for i in range(n)]

    def sample(self, n: int, rng: random.Random, cluster: str | None = None) -> list[Problem]:
        if cluster is not None and cluster not in self.tiers:
            raise KeyError(f"unknown tier {cluster!r}{nearest(cluster, self.clusters)} for task "
                           f"{self.name}; tiers: {', '.join(self.clusters)}")
        names = [cluster] * n if cluster else [rng.choice(self.clusters) for _ in range(n)]
        pools = {
            name: iter([self._to_problem(e, name) for e in
                        self._generate(self.tiers[name], names.count(name), rng.randrange(2**31))])
            for name in dict.fromkeys(names)
        }
        return [next(pools[name]) for name in names]

    def _to_problem(self, entry: dict, tier: str) -> Problem:
        expr = entry["metadata"]["expression"]
        return Problem(prompt=expr.replace(" ", "") + "=", answer=str(entry["answer"]),
                       cluster=tier, meta={"entry": entry, "tokens": expr.split()})

    def solution(self, problem: Problem) -> str:
        steps = _partial_results(problem.meta["tokens"])
        return ",".join(str(s) for s in steps) + ANSWER_MARK + problem.answer

    def score(self, problem: Problem, completion: str) -> float:
        answer = extract_answer(completion)
        if not answer:
            return 0.0
        scorer = self._scorers.get(problem.cluster)
        if scorer is None:
            tier = self.tiers[problem.cluster]
            self._generate(tier, 1, 0)
            scorer = self._scorers[problem.cluster]
        try:
            return float(scorer.score_answer(answer, problem.meta["entry"]))
        except Exception:  # a checker that chokes on malformed text scores 0
            return 0.0

    def is_correct(self, problem: Problem, completion: str) -> bool:
        """The answer after the last `#` equals the gold number (as reasoning-gym's
        checker reads numbers: sign, leading zeros, trailing decimals and commas tolerated).
        Unlike `score`, a wrong number that contains the gold digits ('123' for '3') is
        simply wrong."""
        answer = extract_answer(completion)
        if not answer:
            return False
        try:
            return Decimal(answer.replace(",", "")) == Decimal(problem.answer.replace(",", ""))
        except (InvalidOperation, ValueError):
            return False


TASKS = {
    "chain_sum": lambda: GymArithmeticTask("chain_sum", CHAIN_SUM_TIERS),
    "products": lambda: GymArithmeticTask("products", PRODUCT_TIERS),
}


def get_task(name: str, params: dict | None = None):
    """A built-in task by name, any reasoning-gym dataset as `rg:<dataset>` (with
    `params`: its parameters and tiers), or a user dataset as a path to a .jsonl file."""
    if name.startswith("rg:"):
        from lmpo.tasks.rg import ReasoningGymTask

        return ReasoningGymTask(name[3:], params)
    if params:
        raise ValueError(f"task_params apply only to rg:<dataset> tasks, not {name!r}")
    if name.endswith(".jsonl"):
        from lmpo.tasks.jsonl import JsonlTask

        return JsonlTask(name)
    if name not in TASKS:
        raise KeyError(f"unknown task {name!r}{nearest(name, list(TASKS))}; "
                       f"valid tasks: {', '.join(TASKS)}, rg:<reasoning-gym dataset> or a "
                       ".jsonl path")
    return TASKS[name]()
