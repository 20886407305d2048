"""Where a worked solution in the steps format goes wrong, and what stopping there saves.

A steps-format solution of `9+5-8=` is `9+5=14,14-8=6#6`: step i is `left op term=result`
with `left` the previous step's result (the first term for step 1). The first wrong
step is the first step whose text differs from the correct one, or that is missing (the
response ends, or writes `#`, too early); when every step is right but the answer after
`#` is not, the answer is the wrong step. An oracle that stops each wrong response right
after its first wrong step is written saves the tokens after it: `oracle_savings` is that
share of all generated tokens (ESPO's ceiling on this task).
"""

from __future__ import annotations

from dataclasses import dataclass

from lmpo.tasks.base import ANSWER_MARK, Problem

SEPARATOR = ","


def correct_steps(problem: Problem) -> list[str]:
    """The correct step texts of a chain-sum problem (its `meta["tokens"]`)."""
    from lmpo.tasks.gym import _partial_results

    tokens = problem.meta["tokens"]
    results = _partial_results(tokens)
    lefts = [tokens[0], *(str(r) for r in results[:-1])]
    return [f"{left}{op}{num}={res}" for left, op, num, res
            in zip(lefts, tokens[1::2], tokens[2::2], results, strict=True)]


def first_wrong_end(problem: Problem, completion: str) -> int | None:
    """The character offset just after the first wrong step of `completion` (after the
    answer when only the answer is wrong), or None when the completion is right."""
    body, mark, answer = completion.partition(ANSWER_MARK)
    steps, want = (body.split(SEPARATOR) if body else []), correct_steps(problem)
    offset = 0
    for i in range(max(len(steps), len(want))):
        if i >= len(steps):  # missing: the response answered (or ended) too early
            return min(offset, len(completion))
        end = offset + len(steps[i])
        if i >= len(want) or steps[i] != want[i]:  # a wrong step, or one too many
            return end
        offset = end + 1  # past the separator (or the mark)
    if not mark or answer.strip() != problem.answer:
        return len(completion)
    return None


def tokens_until(tokenizer, response_ids: list[int], chars: int) -> int:
    """The fewest response tokens whose text covers the first `chars` characters."""
    for n in range(len(response_ids) + 1):
        if len(tokenizer.decode(response_ids[:n], skip_special_tokens=True)) >= chars:
            return n
    return len(response_ids)


@dataclass
class Savings:
    tokens: int  # generated tokens, all responses
    saved: int  # tokens after the first wrong step, over the wrong responses
    wrong: int
    responses: int

    @property
    def share(self) -> float:
        return self.saved / max(self.tokens, 1)

    @property
    def accuracy(self) -> float:
        return 1 - self.wrong / max(self.responses, 1)


def oracle_savings(task, tokenizer, problems: list[Problem],
                   responses: list[list[int]]) -> Savings:
    """Replay `responses` (generated token ids, EOS included where generated) of
    `problems`: a wrong one (by `task.is_correct`) stops right after its first wrong
    step; a right one runs to its end."""
    total = saved = wrong = 0
    for p, ids in zip(problems, responses, strict=True):
        text = tokenizer.decode(ids, skip_special_tokens=True)
        total += len(ids)
        if task.is_correct(p, text):
            continue
        wrong += 1
        end = first_wrong_end(p, text)
        stop = len(ids) if end is None else tokens_until(tokenizer, ids, end)
        saved += len(ids) - stop
    return Savings(total, saved, wrong, len(problems))
