"""What a new user meets in the first hour: commands print only lmpo's own output, a
mistyped option says how overrides are written, and a stopped run loses no step."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cellpylib
import yaml

SRC = Path(__file__).resolve().parents[1] / "src"


def test_no_dependency_warning_reaches_the_terminal(tmp_path):
    """cellpylib (under reasoning-gym) compiles with SyntaxWarnings where no bytecode is
    cached; a copy without bytecode first on the path recompiles it on import."""
    fresh = tmp_path / "site"
    shutil.copytree(Path(cellpylib.__file__).parent, fresh / "cellpylib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = os.environ | {"PYTHONPATH": f"{fresh}{os.pathsep}{SRC}", "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run([sys.executable, "-c", "import cellpylib"], env=env,
                           capture_output=True, text=True, check=True)
    assert "SyntaxWarning" in probe.stderr  # the dependency's own warnings, when imported bare
    check = f"import lmpo.tasks, cellpylib; assert cellpylib.__file__.startswith({str(fresh)!r})"
    done = subprocess.run([sys.executable, "-c", check],
                          env=env, capture_output=True, text=True, check=True)
    assert done.stderr == ""


def test_an_option_spelt_as_a_config_key_says_how_overrides_are_written(capsys):
    import pytest

    from lmpo.cli import main

    run = ["train", "--config", "grpo", "--run-dir", "r"]
    for argv, hint in (([*run, "--optim.lr=3e-5"], "optim.lr=3e-5"),
                       ([*run, "--optim.lr", "1e-4"], "optim.lr=1e-4")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"key=value, without dashes: {hint}" in err, err


def test_a_stop_mid_run_checkpoints_the_step_it_finishes_and_resumes_after_it(
        tiny_policy_dir, tmp_path, monkeypatch):
    """SIGINT during step 3 of 5 (checkpoints every 10): step 3 finishes, is checkpointed,
    and the run stops; the rerun goes on at step 4, and the rows equal an uninterrupted
    run's."""
    import signal

    import pytest

    from lmpo.config import load_config
    from lmpo.trainer import loop
    from lmpo.trainer.checkpoint import checkpoint_step, latest_checkpoint, read_rows
    from lmpo.trainer.train_config import TrainConfig

    cfg = load_config(TrainConfig, "grpo", [
        f"policy={tiny_policy_dir}", "steps=5", "rollout.batch_size=16",
        "rollout.max_new_tokens=6", "rollout.pool_size=64", "log.eval_per_tier=4",
        "log.eval_every=5", "log.eval_max_new_tokens=4", "log.tensorboard=false",
        "log.checkpoint_every=10", "threads=1"])
    loop.train(cfg, tmp_path / "whole", progress=False)
    real = loop.train_step

    def interrupted(step, run):
        row = real(step, run)
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-step, as a Ctrl-C would
        return row

    monkeypatch.setattr(loop, "train_step", interrupted)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with pytest.raises(KeyboardInterrupt):
            loop.train(cfg, tmp_path / "stopped", progress=False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, before)  # a background job ignores it
    assert checkpoint_step(latest_checkpoint(tmp_path / "stopped")) == 3
    assert [r["step"] for r in read_rows(tmp_path / "stopped" / "metrics.jsonl")] == [1, 2, 3]
    monkeypatch.setattr(loop, "train_step", real)
    loop.train(cfg, tmp_path / "stopped", resume=True, progress=False)

    def same(rows):
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    assert same(read_rows(tmp_path / "stopped" / "metrics.jsonl")) == same(
        read_rows(tmp_path / "whole" / "metrics.jsonl"))


def test_a_misspelt_policy_fails_up_front_and_a_never_trained_sweep_is_replaced(
        tiny_policy_dir, tmp_path, capsys):
    """A policy that names nothing: one line before any run, nothing written. A folder
    left by an experiment none of whose runs logged a step is replaced on the rerun (one
    line), not refused as "a different experiment"."""
    import pytest

    from lmpo.errors import ConfigError
    from lmpo.experiments.run.sweep import compare
    from tests.test_experiments import experiment

    bad = experiment(tmp_path, "nano-chain-summ", seeds=1, steps=1)
    with pytest.raises(ConfigError) as err:
        compare(bad, tmp_path / "out", live=False)
    assert "arm grpo: policy 'nano-chain-summ' is neither" in str(err.value)
    assert "did you mean 'nano-chain-sum'?" in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()
    left = tmp_path / "out"  # what an earlier lmpo left: an experiment with no step run
    (left / "runs" / "grpo" / "seed0").mkdir(parents=True)
    (left / "runs" / "grpo" / "seed0" / "metrics.jsonl").write_text("")
    (left / "experiment.yaml").write_text(yaml.safe_dump(bad.to_dict()))
    good = experiment(tmp_path, tiny_policy_dir, seeds=1, steps=1)
    assert compare(good, left, live=False, list_only=True) == 0
    assert "never finished a step: replacing it" in capsys.readouterr().out
    assert yaml.safe_load((left / "experiment.yaml").read_text()) == good.to_dict()


def test_lmpo_init_writes_a_starter_whose_smoke_run_works_as_written(sft_run, tmp_path,
                                                                      monkeypatch, capsys):
    """The starter's smoke run, from inside its folder, as its first line says (the
    testbed's warm start is the session's); a second init on the folder is refused."""
    from lmpo.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["init", "starter"]) == 0
    assert "cd starter && lmpo compare --config smoke.yaml" in capsys.readouterr().out
    monkeypatch.chdir(tmp_path / "starter")
    assert main(["compare", "--config", "smoke.yaml", "--out", "runs/smoke", "--jobs", "2"]) == 0
    assert main(["report", "runs/smoke"]) == 0
    report = (tmp_path / "starter" / "runs" / "smoke" / "report.md").read_text()
    assert "insufficient seeds" in report
    assert main(["init", str(tmp_path / "starter")]) == 2
    assert "already exists" in capsys.readouterr().err


def test_a_busy_machine_is_said_and_openmp_sleeps_there():
    """Other work on one of two cores: a 2-thread run says so in one line, a 1-thread run
    does not; before torch loads, OpenMP's wait policy becomes passive only where a core is
    busy and the user set none (a fresh interpreter: torch not yet imported)."""
    from lmpo import process_env

    cores = process_env.usable_cores()
    assert process_env.busy_warning(2, load=cores - 1.0) is not None or cores > 2
    assert process_env.busy_warning(2, load=0.0) is None
    assert process_env.busy_warning(1, load=cores) is None
    probe = ("import sys, lmpo.process_env as p\n"
             "p.usable_cores = lambda: 2\n"
             "for others, env in ((1.0, {}), (0.0, {}), (1.0, {'OMP_WAIT_POLICY': 'ACTIVE'})):\n"
             "    p.others_running = lambda: others\n"
             "    print(p.adapt_waits(env), env.get('OMP_WAIT_POLICY'))\n"
             "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env=os.environ | {"PYTHONPATH": str(SRC)}).stdout
    assert out.split("\n")[:4] == ["True PASSIVE", "False None", "False ACTIVE", "False"]
