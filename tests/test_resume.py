"""Resume exactness: SIGKILL a run at random moments, resume, and get the same run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from lmpo.trainer.checkpoint import latest_checkpoint, read_rows, save_checkpoint, truncate_rows

CONFIGS = Path(__file__).parent.parent / "configs"
STEPS = 6


def command(preset, policy, run_dir, resume=False):
    args = [sys.executable, "-m", "lmpo.cli", "train", "--config", str(CONFIGS / f"{preset}.yaml"),
            "--run-dir", str(run_dir), "--quiet", f"policy={policy}", f"steps={STEPS}",
            "rollout.batch_size=8", "rollout.max_new_tokens=8", "rollout.pool_size=64",
            "log.eval_per_tier=4", "log.eval_every=3", "log.checkpoint_every=1",
            "log.eval_max_new_tokens=6"]
    return args + (["--resume"] if resume else [])


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def weights(run_dir):
    return load_file(str(Path(run_dir) / "policy" / "model.safetensors"))


@pytest.mark.parametrize("preset,seed", [("espo", 1), ("ebpo", 2)])
def test_sigkill_and_resume_reproduces_the_uninterrupted_run(preset, seed, sft_run, tmp_path):
    """The warm-started policy, so that rewards vary and EBPO/ESPO/critic state matters
    (with a random policy every reward is 0 and a lost estimator state goes unnoticed)."""
    policy, _ = sft_run
    env = os.environ | {"PYTHONHASHSEED": "0"}
    full = tmp_path / "full"
    subprocess.run(command(preset, policy, full), check=True, env=env,
                   capture_output=True)
    rng = random.Random(seed)
    killed = tmp_path / "killed"
    kills = 0
    for attempt in range(2):
        proc = subprocess.Popen(command(preset, policy, killed, resume=attempt > 0),
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        target = rng.randint(len(read_rows(killed / "metrics.jsonl")) + 1, STEPS - 1)
        deadline = time.time() + 120
        while len(read_rows(killed / "metrics.jsonl")) < target and proc.poll() is None:
            assert time.time() < deadline, "run made no progress"
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.08))  # land anywhere: mid-step, mid-write, mid-checkpoint
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 1
    subprocess.run(command(preset, policy, killed, resume=True), check=True, env=env,
                   capture_output=True)

    want, got = read_rows(full / "metrics.jsonl"), read_rows(killed / "metrics.jsonl")
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))  # none missing or duplicated
    assert comparable(got) == comparable(want)
    a, b = weights(full), weights(killed)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert json.loads((killed / "eval.json").read_text()) == json.loads(
        (full / "eval.json").read_text())


def test_torn_writes_are_ignored(tmp_path):
    """A stray temporary checkpoint and a half-written metrics line (what a crash in the
    middle of a write leaves) never load as real data."""
    save_checkpoint(tmp_path, 3, {"step": 3})
    (tmp_path / "checkpoints" / ".ckpt-000004.pt.tmp").write_bytes(b"\x80garbage")
    assert latest_checkpoint(tmp_path).name == "ckpt-000003.pt"
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "rew')
    assert [r["step"] for r in read_rows(metrics)] == [1, 2, 3]
    truncate_rows(metrics, 2)
    assert metrics.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_checkpoint_rotation_keeps_the_newest(tmp_path):
    for step in range(1, 6):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["ckpt-000004.pt", "ckpt-000005.pt"]
