"""Common random numbers per held-out problem: a problem's sample j draws from a stream
seeded by the problem and j, so two identical policies give a paired difference of exactly
0 whatever the problems' order and the batch size (one shared stream does not); and every
evaluation keeps its per-problem, per-sample records."""

from __future__ import annotations

import copy
import hashlib
import random

import torch

import lmpo.evaluate as ev
from lmpo.legacy import upgrade_saved
from lmpo.models import load_policy
from lmpo.rollout.streams import RowStreams, problem_id, row_seed
from lmpo.tasks import get_task
from lmpo.tasks.heldout import heldout_split


class Parity:
    """chain_sum's problems, scored by the completion's length parity: about half the
    samples of an untrained policy are 'correct', so records carry information."""

    def __init__(self):
        self.inner = get_task("chain_sum")
        self.name, self.clusters = "parity", self.inner.clusters

    def score(self, problem, completion):
        return float(len(completion) % 2)

    def is_correct(self, problem, completion):
        return len(completion) % 2 == 1


def run(policy, tok, task, problems, *, batch_size, stream):
    return ev.evaluate(policy, tok, task, problems, max_new_tokens=6, temperature=1.0,
                       samples=3, batch_size=batch_size, stream=stream)


def by_problem(result) -> dict[str, str]:
    rec = result["records"]
    return dict(zip(rec["problems"], rec["correct"], strict=True))


def paired_difference(a, b) -> int:
    """Sum over problems and samples of (correct in a) - (correct in b), sample by sample."""
    ra, rb = by_problem(a), by_problem(b)
    assert ra.keys() == rb.keys()
    return sum(abs(int(x) - int(y)) for k in ra for x, y in zip(ra[k], rb[k], strict=True))


def test_identical_policies_differ_by_exactly_zero_under_any_order_and_batch(tiny_policy_dir):
    policy, tok = load_policy(tiny_policy_dir)
    twin = copy.deepcopy(policy)
    task = Parity()
    problems = heldout_split(task.inner, 4).problems
    shuffled = problems[:]
    random.Random(0).shuffle(shuffled)
    a = run(policy, tok, task, problems, batch_size=5, stream="per_problem")
    b = run(twin, tok, task, shuffled, batch_size=7, stream="per_problem")
    assert paired_difference(a, b) == 0
    assert 0 < sum(r.count("1") for r in a["records"]["correct"]) < 3 * len(problems)
    assert a["accuracy_mean"] == b["accuracy_mean"]
    # the one shared stream: a problem's draws follow its place in the batch
    a = run(policy, tok, task, problems, batch_size=5, stream="shared")
    b = run(twin, tok, task, shuffled, batch_size=7, stream="shared")
    assert paired_difference(a, b) > 0


def test_a_rows_stream_is_its_own_whatever_the_batch():
    seeds = [row_seed(7, problem_id(f"{i}+1=", str(i + 1), "t1"), j)
             for i in range(5) for j in range(2)]
    whole = RowStreams(seeds)
    whole.prepare(4)
    part = whole.part(3, 7)
    part.prepare(4)
    rows = torch.tensor([0, 2, 3])
    assert torch.equal(part.at(rows, 2), whole.at(rows + 3, 2))
    g = torch.Generator().manual_seed(seeds[4])
    assert torch.equal(whole.at(torch.tensor([4]), 0).flatten(),
                       torch.rand(4, generator=g, dtype=torch.float64)[:1])


def test_the_seed_is_a_hash_of_the_problem_and_the_sample_index():
    ident = problem_id("3+4=", "7", "t1")
    assert ident == hashlib.sha256(b"3+4=\x007\x00t1").hexdigest()[:16]
    digest = hashlib.sha256(f"7777\0{ident}\0{2}".encode()).digest()
    assert row_seed(7777, ident, 2) == int.from_bytes(digest[:8], "little") & (2**63 - 1)
    assert len({row_seed(7777, ident, j) for j in range(100)}) == 100


def test_records_keep_every_sample_and_the_partial_reward_only_where_it_differs():
    task = get_task("chain_sum")
    problems = heldout_split(task, 2).problems[:2]
    rec = ev.sample_records(problems, 2, [True, False, False, False], [1.0, 0.0, 0.0, 0.0])
    assert rec["correct"] == ["10", "00"] and "reward" not in rec
    assert rec["problems"] == [problem_id(p.prompt, p.answer, p.cluster) for p in problems]
    rec = ev.sample_records(problems, 2, [True, False, False, False], [1.0, 0.5, None, 0.0])
    assert rec["reward"] == [[1.0, 0.5], [None, 0.0]]


def test_a_greedy_evaluation_is_the_same_under_either_stream(tiny_policy_dir):
    policy, tok = load_policy(tiny_policy_dir)
    task = get_task("chain_sum")
    problems = heldout_split(task, 2).problems
    kw = {"max_new_tokens": 5, "temperature": 0.0}
    a = ev.evaluate(policy, tok, task, problems, stream="per_problem", **kw)
    b = ev.evaluate(policy, tok, task, problems, stream="shared", **kw)
    assert a["records"] == b["records"] and a["stream"] == b["stream"] == "greedy"


def test_a_run_config_saved_before_the_streams_reads_the_shared_stream():
    assert upgrade_saved({"log": {"eval_every": 10}})["log"]["eval_stream"] == "shared"
    kept = {"log": {"eval_every": 10, "eval_stream": "per_problem"}}
    assert upgrade_saved(kept)["log"]["eval_stream"] == "per_problem"
