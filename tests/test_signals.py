"""Ctrl-C and SIGTERM sent to `lmpo compare` alone (as a scheduler or a terminal
multiplexer does): its runs finish the step in progress and checkpoint it, one line is printed,
the exit code is 130 / 143, sweep.json says so, nothing keeps running, and the same command
resumes the sweep to its end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lmpo.trainer.checkpoint import read_rows

STEPS = 40


def sweep_file(tmp_path: Path, policy: Path) -> Path:
    data = {"base": {"policy": str(policy), "threads": 1,
                     "rollout": {"batch_size": 16, "pool_size": 64, "max_new_tokens": 8},
                     "log": {"eval_per_tier": 4, "eval_every": 1000, "tensorboard": False,
                             "eval_max_new_tokens": 4, "checkpoint_every": 1}},
            "arms": {"grpo": {"preset": "grpo"}}, "seeds": 1, "steps": STEPS,
            "differs_in": []}
    path = tmp_path / "exp.yaml"
    path.write_text("# signals\n" + yaml.safe_dump(data, sort_keys=False))
    return path


def default_sigint() -> None:
    """A process started from a background job inherits SIGINT ignored (as under CI), and
    Python then never turns it into KeyboardInterrupt: restore it, as a terminal has it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def alive_under(folder: Path) -> list[int]:
    """Processes whose command line names `folder` (the sweep's runs)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(folder) in (proc / "cmdline").read_text():
                pids.append(int(proc.name))
        except OSError:
            continue
    return [p for p in pids if p != os.getpid()]


@pytest.mark.slow  # a sweep started, stopped and resumed in fresh interpreters
@pytest.mark.skipif(not Path("/proc").exists(), reason="reads /proc for leftover processes")
@pytest.mark.parametrize("sig,code,resume", [(signal.SIGINT, 130, True),
                                             (signal.SIGTERM, 143, False)])
def test_a_signal_stops_the_sweep_within_a_step_and_the_rerun_resumes(
        tmp_path, tiny_policy_dir, sig, code, resume):
    path, out = sweep_file(tmp_path, tiny_policy_dir), tmp_path / "out"
    command = [sys.executable, "-m", "lmpo", "compare", "--config", str(path), "--out", str(out)]
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True,  # the signal reaches it alone
                            preexec_fn=default_sigint)
    metrics = out / "runs" / "grpo" / "seed0" / "metrics.jsonl"
    deadline = time.time() + 240
    while len(read_rows(metrics)) < 3:
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.1)
    at_signal = len(read_rows(metrics))
    os.kill(proc.pid, sig)
    sent = time.time()
    _, err = proc.communicate(timeout=60)
    waited = time.time() - sent
    assert proc.returncode == code, err
    assert err.strip().splitlines() == [
        f"lmpo compare: stopped by {sig.name}; each run finished its step in progress and "
        "checkpointed it: rerun the same command to resume them"]
    rows = read_rows(metrics)
    assert len(rows) <= at_signal + 1 < STEPS and waited < 20  # within the step it was in
    assert alive_under(out) == []  # nothing keeps training
    record = json.loads((out / "sweep.json").read_text())[-1]
    assert record["interrupted"] == sig.name and record["status"] == {"grpo-seed0": "interrupted"}
    log = (out / "logs" / "grpo-seed0.log").read_text()
    assert "lmpo train: stopped by SIGTERM; its checkpoints are kept" in log
    assert f"stopped at the end of step {len(rows)}, checkpoint written" in log
    assert "Traceback" not in log
    if resume:
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert [r["step"] for r in read_rows(metrics)] == list(range(1, STEPS + 1))
