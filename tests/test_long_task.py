"""The long-reasoning task for early stopping (`chain_sum_long`): its checker, its
solution format, its tiers, and the oracle replay that finds each wrong response's first
wrong step (benchmarks/oracle_savings.py runs it on a real policy)."""

from __future__ import annotations

import random

import pytest

from lmpo.models import build_tokenizer
from lmpo.tasks import get_task
from lmpo.tasks.steps import correct_steps, first_wrong_end, oracle_savings, tokens_until


@pytest.fixture(scope="module")
def task():
    return get_task("chain_sum_long")


@pytest.fixture(scope="module")
def problem(task):
    return task.sample(1, random.Random(3), cluster="t7d1")[0]


def test_tiers_grow_in_terms_and_length_and_average_at_least_48_tokens(task):
    tok = build_tokenizer()
    assert task.clusters == ["t7d1", "t8d1", "t9d1", "t10d1"]
    means = []
    for i, tier in enumerate(task.clusters):
        problems = task.sample(100, random.Random(i), cluster=tier)
        assert all(len(p.meta["tokens"]) == 2 * (7 + i) - 1 for p in problems)  # terms
        means.append(sum(len(tok.encode(task.solution(p))) for p in problems) / 100)
    assert means == sorted(means) and sum(means) / len(means) >= 48


def test_the_solution_is_every_step_then_the_answer_and_the_checker_reads_it(task, problem):
    steps = correct_steps(problem)
    assert len(steps) == 6
    assert task.solution(problem) == ",".join(steps) + "#" + problem.answer
    assert steps[0].startswith(problem.meta["tokens"][0])
    assert task.is_correct(problem, task.solution(problem))
    wrong = str(int(problem.answer) + 1)
    assert not task.is_correct(problem, ",".join(steps) + "#" + wrong)
    assert task.score(problem, task.solution(problem)) == 1.0


def test_the_first_wrong_step_is_found_where_it_is_written(problem):
    steps = correct_steps(problem)
    right = ",".join(steps) + "#" + problem.answer
    assert first_wrong_end(problem, right) is None
    bad = steps[:2] + [steps[2][:-1] + "9" if not steps[2].endswith("9") else
                       steps[2][:-1] + "8"] + steps[3:]
    text = ",".join(bad) + "#" + problem.answer
    assert first_wrong_end(problem, text) == len(",".join(steps[:3]))  # after step 3
    early = ",".join(steps[:2]) + "#" + problem.answer  # answers after two steps
    assert first_wrong_end(problem, early) == len(",".join(steps[:2])) + 1
    extra = right.replace("#", ",1+1=2#")
    assert first_wrong_end(problem, extra) == len(",".join(steps)) + len(",1+1=2")
    only_answer = ",".join(steps) + "#" + str(int(problem.answer) - 1)
    assert first_wrong_end(problem, only_answer) == len(only_answer)
    cut = ",".join(steps[:4])  # ran out of tokens mid-solution
    assert first_wrong_end(problem, cut) == len(cut)


def test_the_oracle_saves_what_follows_each_wrong_step_of_a_planted_policy(task):
    """A planted 'policy': three responses per problem, one right, one wrong from its first
    step, one wrong at its last step (both with a wrong answer; a wrong step that still
    reaches the gold answer is scored right and runs to its end), each ending with EOS;
    the savings are counted by hand from their lengths."""
    tok = build_tokenizer()
    problems = task.sample(5, random.Random(0), cluster="t8d1")
    reps, responses, want_saved, want_total = [], [], 0, 0
    for p in problems:
        steps = correct_steps(p)
        first = steps[0][:-1] + ("0" if steps[0][-1] != "0" else "1")
        last = steps[-1][:-1] + ("0" if steps[-1][-1] != "0" else "1")
        bad = str(int(p.answer) + 1)
        texts = [",".join(steps) + "#" + p.answer, ",".join([first] + steps[1:]) + "#" + bad,
                 ",".join(steps[:-1] + [last]) + "#" + bad]
        for i, text in enumerate(texts):
            ids = tok.encode(text) + [tok.eos_token_id]
            reps.append(p)
            responses.append(ids)
            want_total += len(ids)
            if i == 1:
                want_saved += len(ids) - len(first)  # stops right after step 1's result
            elif i == 2:
                want_saved += len(ids) - len(",".join(steps[:-1] + [last]))
    s = oracle_savings(task, tok, reps, responses)
    assert (s.tokens, s.saved, s.wrong, s.responses) == (want_total, want_saved, 10, 15)
    assert s.share == pytest.approx(want_saved / want_total)
    assert s.accuracy == pytest.approx(1 / 3)


def test_tokens_until_counts_tokens_not_characters():
    tok = build_tokenizer()
    ids = tok.encode("12+3=15,15-4=11")
    assert tokens_until(tok, ids, 5) == 5 and tokens_until(tok, ids, 0) == 0
    assert tokens_until(tok, ids, 10_000) == len(ids)
