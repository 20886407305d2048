"""Tasks score through reasoning-gym's checkers; JSONL errors; curriculum samplers."""

from __future__ import annotations

import json
import random

import pytest

from lmpo.tasks import DataError, JsonlTask, Problem, Sampler, get_task, load_jsonl


@pytest.mark.parametrize("name", ["chain_sum", "products", "chain_sum_steps"])
def test_gold_scores_one_and_perturbed_zero_for_every_tier(name):
    task = get_task(name)
    rng = random.Random(0)
    for tier in task.clusters:
        for p in task.sample(25, rng, cluster=tier):
            assert p.cluster == tier and p.prompt.endswith("=")
            gold = task.solution(p)
            assert task.score(p, gold) == 1.0, (p, gold)
            wrong = str(int(p.answer) + 1)
            assert task.score(p, gold.rsplit("#", 1)[0] + "#" + wrong) == 0.0
            assert eval(p.prompt[:-1]) == int(p.answer)  # the compact prompt is the problem


@pytest.mark.parametrize("completion", ["", "16", "#", "##", "#abc", "1,2#1#", "\x00#\n16",
                                        "#" + "9" * 500, "#16.0.0", "#-"])
def test_malformed_completions_score_zero_without_raising(completion):
    task = get_task("chain_sum")
    p = next(q for q in task.sample(50, random.Random(1)) if q.answer != "16")
    assert task.score(p, completion) == 0.0


def test_worked_solution_format():
    task = get_task("chain_sum")
    p = Problem("12+7-3=", "16", "t3d2", {"tokens": ["12", "+", "7", "-", "3"]})
    assert task.solution(p) == "19,16#16"
    steps = get_task("chain_sum_steps")
    assert steps.name == "chain_sum_steps" and steps.clusters == task.clusters
    assert steps.solution(p) == "12+7=19,19-3=16#16"
    q = Problem("1-3-7=", "-9", "t3d1", {"tokens": ["1", "-", "3", "-", "7"]})
    assert steps.solution(q) == "1-3=-2,-2-7=-9#-9"
    assert steps.is_correct(q, "1-3=-2,-2-7=-9#-9") and not steps.is_correct(q, "-9#-8")
    same = random.Random(3)
    assert [x.prompt for x in steps.sample(20, same)] == \
        [x.prompt for x in task.sample(20, random.Random(3))]  # chain_sum's problems


def test_sampling_is_deterministic_by_seed_and_covers_tiers():
    task = get_task("chain_sum")
    a = task.sample(40, random.Random(5))
    b = task.sample(40, random.Random(5))
    assert [p.prompt for p in a] == [p.prompt for p in b]
    assert {p.cluster for p in a} == set(task.clusters)
    with pytest.raises(KeyError, match="tiers: t2d1"):
        task.sample(1, random.Random(0), cluster="t9d9")
    with pytest.raises(KeyError, match="valid tasks: chain_sum, products, chain_sum_steps"):
        get_task("chainsum")


def write(tmp_path, lines):
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_jsonl_loads_and_scores(tmp_path):
    path = write(tmp_path, [json.dumps({"prompt": "2+2=", "answer": 4, "cluster": "easy"}), "",
                            json.dumps({"prompt": "capital of France?", "answer": "Paris"})])
    task = JsonlTask(path)
    assert [p.answer for p in task.problems] == ["4", "Paris"]
    assert task.clusters == ["easy", "default"]
    assert task.score(task.problems[0], "2+2=#4") == 1.0
    assert task.score(task.problems[1], " Paris ") == 1.0
    assert task.score(task.problems[1], "#London") == 0.0


@pytest.mark.parametrize("bad,msg", [
    ('{"prompt": "x"', "2: not valid JSON"),
    ('["prompt", "answer"]', "2: expected a JSON object"),
    ('{"prompt": "x"}', r"2: missing required field\(s\) \['answer'\]"),
    ('{"prompt": ["x"], "answer": "1"}', "2: field 'prompt' must be a string"),
])
def test_jsonl_errors_name_file_and_line(tmp_path, bad, msg):
    path = write(tmp_path, [json.dumps({"prompt": "1=", "answer": "1"}), bad,
                            json.dumps({"prompt": "2=", "answer": "2"})])
    with pytest.raises(DataError, match=f"data.jsonl:{msg}"):
        load_jsonl(path)


def test_jsonl_empty_file_is_an_error(tmp_path):
    with pytest.raises(DataError, match="empty"):
        load_jsonl(write(tmp_path, [""]))


def pool():
    return [Problem(f"{c}{i}=", str(i), c) for c in ("easy", "mid", "hard") for i in range(10)]


def drain(sampler, n):
    return [[p.prompt for p in sampler.next_batch()] for _ in range(n)]


@pytest.mark.parametrize("kind", ["shuffled", "clustered", "easy_to_hard"])
def test_samplers_are_deterministic_and_resumable(kind):
    a = Sampler(pool(), 4, kind=kind, seed=3, order=["easy", "mid", "hard"])
    b = Sampler(pool(), 4, kind=kind, seed=3, order=["easy", "mid", "hard"])
    assert drain(a, 7) == drain(b, 7)
    state = a.state_dict()
    c = Sampler(pool(), 4, kind=kind, seed=99, order=["easy", "mid", "hard"])
    c.load_state_dict(json.loads(json.dumps(state)))  # survives a JSON round trip
    assert drain(a, 12) == drain(c, 12)


def test_clustered_batches_come_from_one_cluster_and_easy_to_hard_is_ordered():
    s = Sampler(pool(), 4, kind="easy_to_hard", seed=0, order=["easy", "mid", "hard"])
    batches = drain(s, 9)  # one epoch: 3 batches per cluster (4 + 4 + 2)
    clusters = [{p.rstrip("0123456789=") for p in b} for b in batches]
    assert all(len(c) == 1 for c in clusters)
    assert [c.pop() for c in clusters] == ["easy"] * 3 + ["mid"] * 3 + ["hard"] * 3
    shuffled = Sampler(pool(), 4, kind="clustered", seed=0)
    for b in drain(shuffled, 9):
        assert len({p.rstrip("0123456789=") for p in b}) == 1
    epoch = sorted(p for b in drain(Sampler(pool(), 4, seed=1), 8) for p in b)
    assert epoch == sorted(p.prompt for p in pool())  # 8 batches = every problem exactly once


def test_sampler_errors():
    with pytest.raises(ValueError, match="did you mean 'clustered'"):
        Sampler(pool(), 4, kind="clusterd")


# ---------------------------------------------------------------- exact accuracy
@pytest.mark.parametrize("completion,score,correct", [
    ("1,3#3", 1.0, True), ("#+03", 1.0, True), ("#3.0", 1.0, True),
    ("#123", 1 / 3, False), ("#13", 0.5, False), ("#4", 0.0, False), ("3", 0.0, False),
    ("#", 0.0, False), ("#abc", 0.0, False)])
def test_is_correct_is_exact_where_the_score_gives_partial_credit(completion, score, correct):
    task = get_task("chain_sum")
    p = next(q for q in task.sample(200, random.Random(3), cluster="t2d1") if q.answer == "3")
    assert task.score(p, completion) == pytest.approx(score)
    assert task.is_correct(p, completion) is correct


def test_jsonl_is_correct_matches_its_exact_score(tmp_path):
    path = write(tmp_path, [json.dumps({"prompt": "2+2=", "answer": "4"})])
    task = JsonlTask(path)
    assert task.is_correct(task.problems[0], "#4") and not task.is_correct(task.problems[0], "#44")


# ---------------------------------------------------------------- held-out set
def test_the_memoised_probe_equals_a_fresh_draw_and_tells_tasks_apart(monkeypatch):
    """heldout_split memoises each generated tier's probe by the task's draw_key: the
    memo's split equals one drawn afresh, a task with other parameters or another class
    (another prompt format) gets its own, and a task without draw_key is drawn each time."""
    import lmpo.tasks.heldout as ho
    from lmpo.tasks.rg import ReasoningGymTask

    task = get_task("chain_sum")
    monkeypatch.setattr(ho, "_PROBES", {})
    fresh = [p.prompt for p in ho.heldout_split(task, 30).problems]
    assert len(ho._PROBES) == len(task.clusters)
    memo = ho.heldout_split(get_task("chain_sum"), 30)
    assert [p.prompt for p in memo.problems] == fresh and len(ho._PROBES) == len(task.clusters)
    tier = task.clusters[0]
    plain = ReasoningGymTask("chain_sum", {"tiers": {tier: task.params[tier]}})  # raw prompts
    assert plain.draw_key(tier) != task.draw_key(tier)
    raw = ho.heldout_split(plain, 30).problems
    assert raw[0].prompt != fresh[0] and " " in raw[0].prompt
    calls = []
    monkeypatch.setattr(type(task), "draw_key", None)  # no key: never memoised
    monkeypatch.setattr(type(task), "sample", lambda self, n, rng, cluster=None:
                        calls.append(1) or [Problem("1+1=", "2", cluster)])
    ho.heldout_split(get_task("chain_sum"), 30)
    assert len(calls) == len(task.clusters)


def test_heldout_set_is_fixed_deduplicated_and_capped_for_small_tiers():
    from lmpo.tasks.heldout import heldout_split

    task = get_task("chain_sum")
    a, b = heldout_split(task, 100), heldout_split(get_task("chain_sum"), 100)
    assert [p.prompt for p in a.problems] == [p.prompt for p in b.problems]
    assert len(a.prompts) == len(a.problems)  # no duplicates
    t2d1 = a.counts["t2d1"]
    assert (t2d1.distinct, t2d1.exact, t2d1.heldout, t2d1.capped) == (200, True, 50, True)
    assert a.counts["t3d1"].heldout == 100 and not a.counts["t3d1"].exact
    assert "t2d1: 200 distinct, 50 held out (too few" in a.describe()
    assert "t3d1: >= " in a.describe()
    # a larger request keeps the smaller set as its prefix (SFT holds out a superset)
    bigger = heldout_split(task, 200)
    assert [p.prompt for p in bigger.problems if p.cluster == "t3d1"][:100] == \
        [p.prompt for p in a.problems if p.cluster == "t3d1"]


def test_training_draws_never_contain_a_heldout_problem():
    from lmpo.tasks.heldout import heldout_split, sample_excluding

    task = get_task("chain_sum")
    held = heldout_split(task, 100).prompts
    for seed in range(3):
        pool = sample_excluding(task, 4096, random.Random(seed), held, cluster="t2d1")
        assert len(pool) == 4096 and not {p.prompt for p in pool} & held
        assert len({p.prompt for p in pool}) == 150  # the 200 minus the 50 held out
    with pytest.raises(ValueError, match="could not draw 5 training problems from tier"):
        everything = frozenset(p.prompt for p in task.sample(4000, random.Random(0), "t2d1"))
        sample_excluding(task, 5, random.Random(0), everything, cluster="t2d1")


def test_jsonl_heldout_is_exact_per_cluster(tmp_path):
    from lmpo.tasks.heldout import heldout_split

    lines = [json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1), "cluster": "a" if i < 8
                         else "b"}) for i in range(20)] + [json.dumps({"prompt": "0+1=",
                                                                       "answer": "1",
                                                                       "cluster": "a"})]
    task = JsonlTask(write(tmp_path, lines))
    held = heldout_split(task, 100)
    assert held.counts["a"].distinct == 8 and held.counts["a"].heldout == 2  # the duplicate
    assert held.counts["b"].distinct == 12 and held.counts["b"].heldout == 3
