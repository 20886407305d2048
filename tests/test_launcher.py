"""A sweep's runs forked from the warm server (lmpo.experiments.run.launcher) are ordinary
`lmpo train` processes: the same rows as a fresh interpreter's run, the run's output and
exit code, the sweep's environment and working directory, and no run outlives a sweep
killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lmpo.experiments.run import launcher
from lmpo.trainer.checkpoint import untimed_rows

SETTINGS = {"steps": 2, "rollout": {"batch_size": 8, "pool_size": 64, "max_new_tokens": 6},
            "log": {"eval_per_tier": 2, "eval_max_new_tokens": 4, "tensorboard": False,
                    "eval_every": 100, "checkpoint_every": 1}}


def write_config(tmp_path: Path, policy, name="run", **extra) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"extends": "grpo", "policy": str(policy)} | SETTINGS
                                   | extra))
    return path


def train_command(config: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "lmpo", "train", "--config", str(config), "--run-dir",
            str(run_dir), "--quiet", "--resume"]


def rows(run_dir: Path) -> list[dict]:
    return untimed_rows(run_dir / "metrics.jsonl")


def finish(proc, timeout=300) -> int:
    deadline = time.time() + timeout
    while proc.poll() is None:
        assert time.time() < deadline, "the run did not finish"
        time.sleep(0.2)
    return proc.returncode


def test_a_forked_run_equals_a_fresh_interpreters_run(tiny_policy_dir, tmp_path, monkeypatch):
    config = write_config(tmp_path, tiny_policy_dir)
    env = os.environ | {"PYTHONUNBUFFERED": "1"}
    forked = launcher.start(train_command(config, tmp_path / "forked"), tmp_path / "f.log", env)
    assert isinstance(forked, launcher.Forked)
    assert finish(forked) == 0, (tmp_path / "f.log").read_text()[-2000:]
    monkeypatch.setenv(launcher.FRESH_ENV, "1")
    fresh = launcher.start(train_command(config, tmp_path / "fresh"), tmp_path / "p.log", env)
    assert isinstance(fresh, subprocess.Popen)
    assert finish(fresh) == 0, (tmp_path / "p.log").read_text()[-2000:]
    assert rows(tmp_path / "forked") == rows(tmp_path / "fresh")
    assert len(rows(tmp_path / "fresh")) == 2
    assert "run directory:" in (tmp_path / "f.log").read_text()


def test_a_forked_run_has_the_sweeps_environment_cwd_and_exit_code(tiny_policy_dir, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = write_config(tmp_path, tiny_policy_dir, name="bad", optim={"lr": -1.0})
    proc = launcher.start(train_command(Path("bad.yaml"), Path("runs/bad")), tmp_path / "b.log",
                          os.environ | {"PYTHONUNBUFFERED": "1"})
    assert bad.exists() and finish(proc) == 2  # a config error's exit code, from the file
    assert "optim.lr must be > 0" in (tmp_path / "b.log").read_text()  # found from the cwd
    good = write_config(tmp_path, tiny_policy_dir)
    crash = launcher.start(train_command(good, Path("runs/c")), tmp_path / "c.log",
                           os.environ | {"LMPO_CRASH_AT": "after_row@1"})
    assert finish(crash) != 0  # the run read this environment, not the server's
    assert len(rows(tmp_path / "runs/c")) == 1


KEEPER = """
import os, sys, time
from pathlib import Path
from lmpo.experiments.run import launcher
argv = [sys.executable, "-m", "lmpo", "train", "--config", sys.argv[1], "--run-dir",
        sys.argv[2], "--quiet"]
proc = launcher.start(argv, Path(sys.argv[3]), dict(os.environ))
print(proc.pid, flush=True)
time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "State:\tZ" not in state


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal "
                    "is Linux's")
def test_a_run_dies_with_its_sweep(tiny_policy_dir, tmp_path):
    config = write_config(tmp_path, tiny_policy_dir, steps=100_000)
    sweep = subprocess.Popen([sys.executable, "-c", KEEPER, str(config), str(tmp_path / "run"),
                              str(tmp_path / "run.log")], stdout=subprocess.PIPE, text=True)
    pid = int(sweep.stdout.readline())
    deadline = time.time() + 120
    while not (tmp_path / "run" / "metrics.jsonl").exists():  # the run is training
        assert time.time() < deadline and sweep.poll() is None
        time.sleep(0.2)
    assert alive(pid)
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    deadline = time.time() + 20
    while alive(pid) and time.time() < deadline:
        time.sleep(0.2)
    assert not alive(pid), f"run {pid} outlived its sweep"


def test_a_ray_task_asks_for_a_gpu_for_cuda_and_for_auto_on_a_node_with_one():
    from lmpo.experiments.run.ray_launcher import gpus_for

    assert [gpus_for(d, 0) for d in ("cuda", "auto", "cpu")] == [1, 0, 0]
    assert [gpus_for(d, 8) for d in ("cuda", "auto", "cpu")] == [1, 1, 0]


# ---------------------------------------------------------------- the registry
def test_every_launcher_is_registered_once_and_keeps_the_protocol():
    """The command line's choices and the sweep read one registry; each launcher's class
    has every method of the `Launcher` protocol (pool is built here; Ray's class is read
    without starting Ray)."""
    from lmpo.cli import build_parser
    from lmpo.experiments.run.launchers import LAUNCHERS, Launcher, build_launcher
    from lmpo.experiments.run.ray_launcher import RayPool

    assert LAUNCHERS.names() == ["pool", "ray"]
    pool = build_launcher("pool", jobs=2, out=Path("runs/x"))
    assert isinstance(pool, Launcher) and pool.name == "pool" and pool.free()
    methods = [m for m in dir(Launcher) if not m.startswith("_")]
    assert {"free", "start", "poll", "where", "describe", "close"} <= set(methods)
    assert all(callable(getattr(RayPool, m)) for m in methods if m not in ("name", "retries"))
    for name in LAUNCHERS.names():
        meta = LAUNCHERS.meta(name)
        assert meta["help"] and callable(meta["verl"]), name
    compare = build_parser()._subparsers._group_actions[0].choices["compare"]
    (option,) = [a for a in compare._actions if "--launcher" in a.option_strings]
    assert list(option.choices) == LAUNCHERS.names()
    assert all(f"{name}: " in option.help for name in LAUNCHERS.names())


def test_a_launcher_that_takes_no_address_or_an_unknown_one_is_refused_in_one_line(tmp_path):
    from lmpo.errors import ConfigError, UnknownName
    from lmpo.experiments.run.launchers import check_address
    from lmpo.experiments.run.sweep import compare
    from lmpo.experiments.spec import load_experiment

    with pytest.raises(ConfigError, match=r"^--address is for --launcher ray$"):
        check_address("pool", "auto")
    check_address("ray", "auto")
    with pytest.raises(UnknownName, match=r"unknown launcher 'rya' \(did you mean 'ray'\?\); "
                                          r"valid launchers: pool, ray"):
        compare(load_experiment("demo"), tmp_path / "out", launcher_name="rya")
    assert not (tmp_path / "out").exists()
