"""A user's reward function under guard: its file's import errors and sys.exit() are one
line naming it; a call that hangs is stopped after reward.timeout_s with one line naming
the sample; what it prints cannot corrupt the worker's replies; a worker that dies is one
line. (Scores out of range: tests/test_rewards.py.)"""

from __future__ import annotations

import time

import pytest

from lmpo.cli import main
from lmpo.errors import LmpoError
from lmpo.rewards import RewardError, build_reward
from lmpo.tasks import Problem


def probs(*answers: str) -> list[Problem]:
    return [Problem(f"q{i}", a, "c") for i, a in enumerate(answers)]


def spec_of(tmp_path, body: str, name: str = "user_reward") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(body)
    return f"{path}:reward"


@pytest.mark.parametrize("head,message", [
    ("import sys\nsys.exit(3)\n", r"called sys.exit\(3\) while being imported"),
    ("raise SystemExit\n", r"called sys.exit\(None\) while being imported"),
    ("import no_such_module_here\n", r"failed to import: ModuleNotFoundError: No module named"),
])
def test_a_reward_file_that_fails_at_import_is_one_line_naming_it(tmp_path, capsys, head,
                                                                   message):
    spec = spec_of(tmp_path, head + "def reward(p, c, a, **m):\n    return [0.0] * len(c)\n",
                   name=f"bad_{abs(hash(head))}")
    code = main(["train", "--config", "grpo", "--run-dir", str(tmp_path / "run"),
                 f"reward.fn={spec}", "steps=1"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"reward.fn {spec!r}" in err and __import__("re").search(message, err), err
    assert not (tmp_path / "run").exists()


HANGS = """
import time
def reward(prompts, completions, answers, **meta):
    print("scoring", len(completions))  # goes to the log, not into the replies
    if "hang" in completions:
        time.sleep(3600)
    return [float(len(c)) for c in completions]
"""


def test_a_hanging_reward_is_stopped_naming_the_sample(tmp_path):
    reward = build_reward(spec_of(tmp_path, HANGS), None, timeout_s=1.5)
    assert reward.score(probs("1", "2"), ["ab", "c"])[0] == [2.0, 1.0]  # prints, still right
    started = time.time()
    with pytest.raises(RewardError, match=r"did not return within reward.timeout_s = 1.5 s on "
                                          r"sample 2 \(prompt 'q2', completion 'hang'\)"):
        reward.score(probs("1", "2", "3"), ["ab", "c", "hang"])
    assert time.time() - started < 10  # the batch's 1.5 s, two quick samples, the hang's 1.5
    assert reward.score(probs("1"), ["abc"])[0] == [3.0]  # a fresh worker for the next call


def test_a_reward_that_ends_its_process_is_one_line(tmp_path):
    reward = build_reward(spec_of(tmp_path, "import os\ndef reward(p, c, a, **m):\n"
                                            "    os._exit(7)\n", name="exits"), None)
    with pytest.raises(LmpoError, match=r"its worker process exited \(code 7"):
        reward.score(probs("1"), ["a"])


def test_the_worker_raises_the_functions_own_error_naming_the_sample(tmp_path):
    body = "def reward(p, c, a, **m):\n    return [1 / len(x) for x in c]\n"
    with pytest.raises(RewardError, match=r"raised ZeroDivisionError: division by zero on "
                                          r"sample 1 \(prompt 'q1', completion ''\)"):
        build_reward(spec_of(tmp_path, body, "zero"), None).score(probs("1", "2"), ["ab", ""])
