"""reasoning-gym arithmetic tasks in a compact worked format a tiny model can learn.

A chain sum `12 + 7 - 3` becomes the prompt `12+7-3=` and the worked solution
`19,16#16`: the running result after each operation, then `#` and the answer.
Problems and gold answers come from reasoning-gym's seeded generators and every
completion is scored by the dataset's own `score_answer` on the text after `#`.

`chain_sum_steps` is the same task with every operation written out,
`12+7=19,19-3=16#16`: about twice as long, so that stopping a failing response
early (ESPO) has tokens to save. Prompts, answers and checkers are chain_sum's.

`chain_sum_long` is the long-reasoning task for early stopping: chains of 7 to 10
one-digit terms in the steps format (worked solutions of 45-70 tokens, 57 on average),
where a wrong step is visible as soon as its result is written (`lmpo.tasks.steps` finds
it). Two-digit chains were left out: the nano policy's warm start solves 3-5% of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from lmpo.errors import ConfigError, UnknownName
from lmpo.registry import nearest
from lmpo.tasks.base import ANSWER_MARK, Problem, extract_answer
from lmpo.tasks.rg import ReasoningGymTask


@dataclass(frozen=True)
class Tier:
    name: str
    terms: int
    digits: int


CHAIN_SUM_TIERS = (Tier("t2d1", 2, 1), Tier("t3d1", 3, 1), Tier("t2d2", 2, 2),
                   Tier("t4d2", 4, 2))
PRODUCT_TIERS = (Tier("t2d1", 2, 1), Tier("t3d1", 3, 1), Tier("t2d2", 2, 2))
LONG_TIERS = (Tier("t7d1", 7, 1), Tier("t8d1", 8, 1), Tier("t9d1", 9, 1), Tier("t10d1", 10, 1))


WORKED = ("compact", "steps")


def _partial_results(tokens: list[str]) -> list[int]:
    """Left-to-right running values of `a op b op c ...` (ops + - *)."""
    acc = int(tokens[0])
    out = []
    for op, num in zip(tokens[1::2], tokens[2::2], strict=True):
        n = int(num)
        acc = acc + n if op == "+" else acc - n if op == "-" else acc * n
        out.append(acc)
    return out


class GymArithmeticTask(ReasoningGymTask):
    """A reasoning-gym arithmetic dataset (`chain_sum`, `products`) with tiers of terms x
    digits, in the compact worked format; the dataset's checker reads the text after `#`."""

    def __init__(self, dataset: str, tiers: tuple[Tier, ...], worked: str = "compact",
                 name: str | None = None):
        super().__init__(dataset, {"tiers": {
            t.name: {"min_terms": t.terms, "max_terms": t.terms, "min_digits": t.digits,
                     "max_digits": t.digits} for t in tiers}})
        if worked not in WORKED:
            raise ValueError(f"worked must be one of {WORKED}, got {worked!r}")
        self.name = name or (dataset if worked == "compact" else f"{dataset}_{worked}")
        self.worked = worked

    def _to_problem(self, entry: dict, tier: str) -> Problem:
        expr = entry["metadata"]["expression"]
        return Problem(prompt=expr.replace(" ", "") + "=", answer=str(entry["answer"]),
                       cluster=tier, meta={"entry": entry, "tokens": expr.split()})

    def solution(self, problem: Problem) -> str:
        tokens = problem.meta["tokens"]
        steps = _partial_results(tokens)
        if self.worked == "steps":  # `a op b = r`, then `r op c = r'`, ...
            lefts = [tokens[0], *(str(s) for s in steps[:-1])]
            parts = [f"{left}{op}{num}={res}" for left, op, num, res
                     in zip(lefts, tokens[1::2], tokens[2::2], steps, strict=True)]
            return ",".join(parts) + ANSWER_MARK + problem.answer
        return ",".join(str(s) for s in steps) + ANSWER_MARK + problem.answer

    def answer_text(self, completion: str) -> str | None:
        return extract_answer(completion)

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
    "chain_sum_steps": lambda: GymArithmeticTask("chain_sum", CHAIN_SUM_TIERS, "steps"),
    "chain_sum_long": lambda: GymArithmeticTask("chain_sum", LONG_TIERS, "steps",
                                                name="chain_sum_long"),
}


def get_task(name: str, params: dict | None = None):
    """A built-in task by name, any reasoning-gym dataset as `rg:<dataset>` (with
    `params`: its parameters and tiers), or a user dataset: a .jsonl or .parquet file or a
    local `datasets` folder."""
    if name.startswith("rg:"):
        return ReasoningGymTask(name[3:], params)
    if params:
        raise ConfigError(f"task_params apply only to rg:<dataset> tasks, not {name!r}")
    from lmpo.tasks.jsonl import JsonlTask, is_dataset_path

    if is_dataset_path(name):
        return JsonlTask(name)
    if name not in TASKS:
        raise UnknownName(f"unknown task {name!r}{nearest(name, list(TASKS))}; "
                       f"valid tasks: {', '.join(TASKS)}, rg:<reasoning-gym dataset>, or a "
                       ".jsonl / .parquet path or a `datasets` folder")
    return TASKS[name]()
