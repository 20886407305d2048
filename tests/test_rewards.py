"""Reward functions: built-in checkers, user functions in TRL's shape, None scores,
errors that name the sample, and math-verify under a timeout that works in any thread."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from lmpo.errors import ConfigError
from lmpo.rewards import GuardedWorker, RewardError, build_reward, exact_match, last_number
from lmpo.tasks import Problem, get_task
from lmpo.trainer.batch import score_rollout


def probs(*answers):
    return [Problem(f"q{i}", a, "c") for i, a in enumerate(answers)]


@pytest.mark.parametrize("completion, answer, expected", [
    ("The answer is 13.", "13", 1.0),
    ("7 + 6 = 12, no wait, 13", "13", 1.0),
    ("13 or maybe 14", "13", 0.0),
    ("It is -8.", "-8", 1.0),
    ("a total of 1,000.0", "1000", 1.0),
    ("no number here", "3", 0.0),
    ("3.5", "3", 0.0),
    ("", "0", 0.0),
    ("x = 0.5", "0.5", 1.0),
    ("5", "five", 0.0),
])
def test_last_number(completion, answer, expected):
    assert last_number(completion, answer) == expected


def test_exact_match_strips_whitespace_only():
    assert exact_match(" 13\n", "13") == 1.0
    assert exact_match("13.", "13") == 0.0


def test_builtin_reward_is_binary_and_its_accuracy_is_a_score_of_one():
    scores, correct = build_reward("last_number", None).score(probs("2", "3"), ["so 2", "4"])
    assert scores == [1.0, 0.0] and correct == [True, False]


def test_task_reward_keeps_partial_credit_and_the_tasks_correctness():
    task = get_task("chain_sum")
    task.sample(1, __import__("random").Random(0), cluster="t2d1")
    p = Problem("1+2=", "3", "t2d1", {"entry": {"answer": "3"}})
    scores, correct = build_reward("task", task).score([p, p], ["3#3", "#123"])
    assert scores[0] == 1.0 and correct == [True, False] and 0 < scores[1] < 1


# a reward with spread in almost every group, whatever the policy: the completion's length
LENGTH_REWARD = """
def reward(prompts, completions, answers, **meta):
    return [len(c) / 10 for c in completions]
"""


def write_fn(tmp_path, body: str) -> str:
    """`body` (defining `reward`) as a file; returns its `file.py:reward` spec."""
    path = tmp_path / f"user_reward_{abs(hash(body))}.py"
    path.write_text(body)
    return f"{path}:reward"


@pytest.mark.parametrize("timeout_s", [None, 30.0])  # in this process; in a worker
def test_user_function_gets_trl_shape_and_none_means_no_score(tmp_path, timeout_s):
    spec = write_fn(tmp_path, """
import json, pathlib
def reward(prompts, completions, answers, **meta):
    seen = dict(prompts=prompts, completions=completions, answers=answers, meta=meta)
    pathlib.Path(__file__).with_suffix(".json").write_text(json.dumps(seen))
    return [1.0 if c == a else None if c == "skip" else 0.25 for c, a in
            zip(completions, answers)]
""")
    reward = build_reward(spec, None, timeout_s=timeout_s)
    scores, correct = reward.score(probs("1", "2", "3"), ["1", "skip", "x"])
    assert scores == [1.0, None, 0.25] and correct == [True, False, False]
    seen = json.loads(Path(spec.rpartition(":")[0]).with_suffix(".json").read_text())
    assert seen["prompts"] == ["q0", "q1", "q2"] and seen["answers"] == ["1", "2", "3"]
    assert seen["meta"] == {"cluster": ["c", "c", "c"]}


def test_a_raising_user_function_names_the_sample(tmp_path):
    spec = write_fn(tmp_path, """
def reward(prompts, completions, answers, **meta):
    return [1 / len(c) for c in completions]
""")
    with pytest.raises(RewardError, match=r"ZeroDivisionError.* on sample 1 \(prompt 'q1', "
                                          r"completion ''\)"):
        build_reward(spec, None).score(probs("1", "2", "3"), ["ab", "", "c"])


@pytest.mark.parametrize("body, msg", [
    ("return [1.0]", "returned 1 scores for 2 completions"),
    ("return [1.0, float('nan')]", r"returned nan .* for sample 1 \(prompt 'q1'"),
    ("return [1.0, 'high']", r"returned 'high' \(not a finite number within \+-1e\+06, or None"),
    ("return [1.0, -1e308]", r"returned -1e\+308 \(not a finite number within \+-1e\+06"),
    ("return 1.0", r"returned 1.0: expected a list of 2 scores"),
])
def test_a_user_function_returning_garbage_is_a_clear_error(tmp_path, body, msg):
    spec = write_fn(tmp_path, f"def reward(prompts, completions, answers, **meta):\n    {body}\n")
    with pytest.raises(RewardError, match=msg):
        build_reward(spec, None).score(probs("1", "2"), ["a", "b"])


def test_unknown_reward_names_fail_with_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"'last_numbr' unknown \(did you mean 'last_number'"
                                          r"\?\); valid: task, exact, last_number, math_verify"):
        build_reward("last_numbr", None)
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        build_reward(write_fn(tmp_path, "x = 1\n").replace(":reward", ":nope"), None)
    with pytest.raises(ConfigError, match="does not exist"):
        build_reward(str(tmp_path / "missing.py") + ":f", None)


def test_score_rollout_counts_errors_as_zero_only_when_asked(tmp_path):
    spec = write_fn(tmp_path, """
def reward(prompts, completions, answers, **meta):
    if "boom" in completions:
        raise ValueError("bad sample")
    return [1.0 for _ in completions]
""")
    reward = build_reward(spec, None)
    stops = ["eos", "early_stop", "eos", "length"]
    texts = ["ok", "stopped", "boom", "fine"]
    with pytest.raises(RewardError, match="bad sample on sample 2"):  # its index in the batch
        score_rollout(reward, probs("1", "2", "3", "4"), texts, stops, stop_score=-1.0,
                      on_error="raise")
    scores, correct, errors = score_rollout(reward, probs("1", "2", "3", "4"), texts, stops,
                                            stop_score=-1.0, on_error="zero")
    assert scores == [1.0, -1.0, 0.0, 1.0] and errors == 1
    assert correct == [True, False, False, True]
    # a controller whose stops are ordinary truncations: the stopped text is scored
    scores, correct, _ = score_rollout(reward, probs("1", "2", "3", "4"), texts, stops,
                                       stop_score=None, on_error="zero")
    assert scores == [1.0, 1.0, 0.0, 1.0] and correct == [True, True, False, True]


def test_math_verify_checks_equivalence():
    scores, _ = build_reward("math_verify", None).score(
        probs("2", "0.5", "3", "1/2"),
        ["so $\\boxed{2}$", "it is 1/2", "the answer is 4", "0.5"])
    assert scores == [1.0, 1.0, 0.0, 1.0]


def test_the_guard_times_out_a_hanging_checker_then_recovers_in_any_thread():
    worker = GuardedWorker("sleep", timeout=0.5)
    try:
        assert worker("0", "0.75") == 0.75
        start = time.perf_counter()
        assert worker("30", "1") == 0.0  # hangs: killed after the timeout, scored 0
        assert time.perf_counter() - start < 5 and worker.timeouts == 1
        out = []
        thread = threading.Thread(target=lambda: out.append(worker("0.1", "1")))
        thread.start()
        thread.join()
        assert out == [1.0]  # a fresh worker, called from a non-main thread
    finally:
        worker.close()


@pytest.mark.parametrize("rule, dropped", [("i % 3 == 0", 6), ("True", 16)])
def test_none_scores_are_dropped_from_the_update_and_counted(tiny_policy_dir, tmp_path, rule,
                                                             dropped):
    import json

    from lmpo.config import load_config
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    spec = write_fn(tmp_path, f"""
def reward(prompts, completions, answers, **meta):
    return [None if {rule} else len(c) / 10 for i, c in enumerate(completions)]
""")
    cfg = load_config(TrainConfig, "grpo", [
        f"policy={tiny_policy_dir}", f"reward.fn={spec}", "steps=2", "rollout.batch_size=16",
        "rollout.group_size=4", "rollout.max_new_tokens=6", "rollout.pool_size=32",
        "log.eval_per_tier=2", "log.eval_max_new_tokens=4", "log.tensorboard=false"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["data/reward_none"] for r in rows] == [dropped, dropped]
    if dropped == 16:  # nothing scored: the step is logged without an update
        assert all(r["train/updates"] == 0 for r in rows)
    else:  # 10 scored samples in groups of 2-4 still train
        assert all(r["train/updates"] == 4 and r["grad/norm"] > 0 for r in rows)
