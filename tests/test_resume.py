"""Resume exactness: crash a run at named points (deterministic crash injection),
resume, and get the same run; a changed config is refused; checkpoints load only
tensors and plain containers."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from lmpo.experiments.run import launcher
from lmpo.faults import CRASH_EXIT_CODE
from lmpo.trainer.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    load_checkpoint,
    read_rows,
    save_checkpoint,
    truncate_rows,
)

STEPS = 6


def command(preset, policy, run_dir, resume=False, extra=()):
    args = [sys.executable, "-m", "lmpo", "train", "--config", preset,
            "--run-dir", str(run_dir), "--quiet", f"policy={policy}", f"steps={STEPS}",
            "rollout.batch_size=16", "rollout.max_new_tokens=8", "rollout.pool_size=64",
            "log.eval_per_tier=4", "log.eval_every=3", "log.checkpoint_every=1",
            "log.eval_max_new_tokens=6", *extra]
    return args + (["--resume"] if resume else [])


def run_process(argv, env, tmp_path) -> tuple[int, str]:
    """`argv` (an `lmpo train` command) as its own process, as a sweep starts its runs
    (forked from the warm server: tests/test_launcher.py shows it is the same run); its
    exit code and output."""
    log = tmp_path / f"process-{len(list(tmp_path.glob('process-*')))}.log"
    proc = launcher.start(argv, log, env)
    proc.wait()
    return proc.returncode, log.read_text()


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def weights(run_dir):
    return load_file(str(Path(run_dir) / "policy" / "model.safetensors"))


# a stateful comparator (its own EBPO moments, checkpointed with the run) and a loss one
SHADOWS = ("log.comparators={ebpo_fast: {advantage: {name: ebpo, hparams: {decay: 0.5}}}, "
           "cispo: {loss: {name: cispo}}}",)


# adaptive KL and entropy coefficients (lmpo.trainer.schedules), checkpointed with the run,
# and a reference mixed toward the policy every 2 steps (kl.ref_sync_every): its weights too
SCHEDULED = ("kl.coef=0.05", "kl.schedule={name: adaptive_kl, hparams: {target_kl: 1.0e-4, "
             "horizon: 30}}", "optim.minibatches=2", "optim.entropy_schedule={name: "
             "adaptive_entropy, hparams: {target: 100.0, delta: 0.003}}", "kl.ref_sync_every=2")


@pytest.mark.parametrize("preset,crashes,extra", [
    ("espo", ["after_row@2", "mid_checkpoint@4", "before_row@5"], ()),
    ("ebpo", ["after_checkpoint@1", "mid_checkpoint@3", "after_row@5"], SHADOWS),
    ("grpo", ["after_row@2", "after_checkpoint@4"], SCHEDULED),
])
def test_crash_and_resume_reproduces_the_uninterrupted_run(preset, crashes, extra, sft_run,
                                                           tmp_path):
    """The warm-started policy, so that rewards vary and EBPO/ESPO/critic state matters
    (with a random policy every reward is 0 and a lost estimator state goes unnoticed).
    Each crash exits the process at once (as abruptly as SIGKILL) at a named point. The
    EBPO run's same-batch comparators resume too: their rows match the uninterrupted
    run's."""
    policy, _ = sft_run
    env = dict(os.environ)
    env.pop("LMPO_CRASH_AT", None)
    full = tmp_path / "full"
    assert run_process(command(preset, policy, full, extra=extra), env, tmp_path)[0] == 0
    crashed = tmp_path / "crashed"
    for i, spec in enumerate(crashes):
        code, log = run_process(command(preset, policy, crashed, resume=i > 0, extra=extra),
                                env | {"LMPO_CRASH_AT": spec}, tmp_path)
        assert code == CRASH_EXIT_CODE, (spec, log[-2000:])
    code, log = run_process(command(preset, policy, crashed, resume=True, extra=extra), env,
                            tmp_path)
    assert code == 0, log[-2000:]

    want, got = read_rows(full / "metrics.jsonl"), read_rows(crashed / "metrics.jsonl")
    assert [r["step"] for r in got] == list(range(1, STEPS + 1))  # none missing or duplicated
    assert comparable(got) == comparable(want)
    if extra == SHADOWS:
        assert all(1e-6 < r["shadow/ebpo_fast/adv_tv"] <= 1 for r in got[1:])
    if extra == SCHEDULED:  # the coefficients moved every step, and resumed where they were
        assert len({r["schedule/kl_coef"] for r in got}) == STEPS
        assert [r["schedule/entropy_coef"] for r in got] == pytest.approx(
            [0.006 * (i + 1) for i in range(STEPS)])
        assert [r["kl/ref_syncs"] for r in got] == [0, 1, 1, 2, 2, 3]
    a, b = weights(full), weights(crashed)
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert json.loads((crashed / "eval.json").read_text()) == json.loads(
        (full / "eval.json").read_text())


def test_resume_refuses_a_changed_config_but_not_more_steps(sft_run, tmp_path, capsys):
    from lmpo.cli import main

    policy, _ = sft_run
    run = tmp_path / "run"
    base = command("grpo", policy, run)[3:]  # the CLI arguments after `-m lmpo`
    assert main([*base, "steps=2"]) == 0
    rc = main([*base, "steps=2", "optim.lr=1e-3", "rollout.temperature=0.7", "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "only steps, threads and log.* may change" in err
    assert "optim.lr: 2e-05 -> 0.001" in err and "rollout.temperature: 1.0 -> 0.7" in err
    assert main([*base, "steps=3", "log.eval_every=1", "threads=1", "--resume"]) == 0
    assert [r["step"] for r in read_rows(run / "metrics.jsonl")] == [1, 2, 3]


def test_a_malformed_crash_spec_fails_before_any_work(sft_run, tmp_path):
    policy, _ = sft_run
    env = os.environ | {"LMPO_CRASH_AT": "somewhere@2"}
    code, log = run_process(command("grpo", policy, tmp_path / "r"), env, tmp_path)
    assert code != 0 and "expected <point>@<step>" in log
    assert not (tmp_path / "r" / "metrics.jsonl").exists()


class Opaque:
    pass


def test_checkpoints_hold_only_tensors_and_plain_containers(tmp_path):
    with pytest.raises(TypeError, match=r"state\['estimator'\]\['x'\] is a Opaque"):
        save_checkpoint(tmp_path, 1, {"estimator": {"x": Opaque()}})
    folder = tmp_path / "checkpoints"
    folder.mkdir(exist_ok=True)
    torch.save({"step": 1, "evil": Opaque()}, folder / "ckpt-000002.pt")  # not via lmpo
    with pytest.raises(CheckpointError, match="refusing to load .*ckpt-000002.pt"):
        load_checkpoint(latest_checkpoint(tmp_path))
    save_checkpoint(tmp_path, 3, {"rng": torch.Generator().get_state(), "xs": [1, (2.0, None)]})
    assert load_checkpoint(latest_checkpoint(tmp_path))["xs"] == [1, (2.0, None)]


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
    assert names == ["ckpt-000004.pt", "ckpt-000004.pt.json", "ckpt-000005.pt",
                     "ckpt-000005.pt.json"]  # each with its size and checksum


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_a_stop_during_a_checkpoint_write_waits_for_it_to_be_whole(tmp_path, monkeypatch, name):
    """A signal that lands inside torch's zip writer would surface as its "unexpected pos"
    RuntimeError and cost the checkpoint: it is held until the file is whole, then stops."""
    from lmpo.errors import Interrupted, on_sigterm
    from lmpo.trainer import checkpoint
    sig = getattr(signal, name)
    previous = {s: signal.signal(s, h) for s, h in ((signal.SIGTERM, on_sigterm),
                                                   (signal.SIGINT, signal.default_int_handler))}
    write, sent = checkpoint.FullWrites.write, []

    def write_then_signal(self, data):
        if not sent:
            sent.append(sig)
            os.kill(os.getpid(), sig)  # its handler runs here, inside torch's writer
        return write(self, data)

    monkeypatch.setattr(checkpoint.FullWrites, "write", write_then_signal)
    try:
        with pytest.raises(Interrupted if name == "SIGTERM" else KeyboardInterrupt):
            save_checkpoint(tmp_path, 2, {"weights": torch.arange(300_000.0)})
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    assert sent and signal.getsignal(sig) is previous[sig]  # the handlers are put back
    state = load_checkpoint(latest_checkpoint(tmp_path))
    assert torch.equal(state["weights"], torch.arange(300_000.0))


OLD_ESPO = {"enabled": True, "mode": "full", "warmup": False, "r_fail": -1.0, "beta": 0.05,
            "adapt_beta": False, "target_rate": 0.25, "beta_lr": 0.1, "eps_v": 0.2,
            "alpha_s": 0.9, "min_tokens": 1, "warmup_loss_frac": 0.5, "warmup_rel_change": 0.2,
            "warmup_patience": 3, "savings": None, "reference": None,
            "measure_false_positives": True}


def as_written_before_controllers(saved: dict) -> dict:
    """A run config as lmpo wrote it before rollout controllers had a registry: an `espo:`
    section with every field, GAE's settings beside `advantage.name`, `log.or_alpha`."""
    old = {k: v for k, v in saved.items() if k != "controller"}
    old["espo"] = OLD_ESPO
    adv = saved["advantage"]
    old["advantage"] = {"name": adv["name"], "hparams": {}, **adv["hparams"]}
    old["log"] = {k: v for k, v in saved["log"].items() if k != "diagnostics"} \
        | {"or_alpha": None}
    return old


def test_a_run_saved_by_an_earlier_lmpo_resumes_and_evaluates(tiny_policy_dir, tmp_path):
    """Checkpoints kept their state keys, and a saved config.yaml of the earlier layout is
    upgraded: the resumed run writes the rows the uninterrupted run wrote, and `lmpo eval
    --run` reads it. A config *file* in the old layout fails with what replaced it."""
    import yaml

    from lmpo.cli import main
    from lmpo.config import ConfigError, load_config
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    def cfg(steps):
        return load_config(TrainConfig, "espo", [
            f"policy={tiny_policy_dir}", f"steps={steps}", "rollout.batch_size=16",
            "rollout.max_new_tokens=8", "rollout.pool_size=64", "log.eval_per_tier=4",
            "log.eval_every=3", "log.checkpoint_every=2", "log.eval_max_new_tokens=6",
            "log.tensorboard=false",
            "controller.hparams={mode: full, warmup: false, r_fail: -1.0, beta: 0.05}"])

    train(cfg(4), tmp_path / "full", progress=False)
    part = tmp_path / "part"
    train(cfg(2), part, progress=False)
    saved = yaml.safe_load((part / "config.yaml").read_text())
    old = as_written_before_controllers(saved)
    (part / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    train(cfg(4), part, resume=True, progress=False)
    rows, want = (comparable(read_rows(d / "metrics.jsonl")) for d in (part, tmp_path / "full"))
    assert rows[2:] == want[2:]  # after the resume: what the uninterrupted run wrote
    no_eval = [{k: v for k, v in r.items() if not k.startswith("eval/")} for r in rows[:2]]
    assert no_eval == want[:2]  # before it (the 2-step run also evaluated at its end)
    assert sum(r.get("espo/stopped", 0) for r in rows) > 0  # the controller acted
    (part / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    assert main(["eval", "--run", str(part), "--per-tier", "2"]) == 0
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    with pytest.raises(ConfigError, match="config key 'espo' was replaced by `controller"):
        load_config(TrainConfig, str(tmp_path / "old.yaml"))


def test_a_key_a_newer_lmpo_added_resumes_at_its_default(tmp_path):
    """A run saved before kl.bias_correction and loss.off_policy_mask_threshold existed
    resumes (they default to what it ran); set to another value, they are a change."""
    from lmpo.config import load_config, to_dict
    from lmpo.errors import ConfigError
    from lmpo.trainer.resume import check_resumable
    from lmpo.trainer.train_config import TrainConfig

    cfg = load_config(TrainConfig, "grpo")
    old = to_dict(cfg)
    del old["kl"]["bias_correction"], old["loss"]["off_policy_mask_threshold"]
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(old))
    check_resumable(saved, cfg)
    with pytest.raises(ConfigError, match="kl.bias_correction"):
        check_resumable(saved, load_config(TrainConfig, "grpo", ["kl.bias_correction=true"]))


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto stands for cuda on this machine")
def test_a_run_saved_under_cpu_resumes_under_auto_where_there_is_no_cuda(tmp_path):
    """`device: auto` (the default) is compared as the device it stands for: the runs
    committed with `device: cpu` resume under it here; cuda is still a change."""
    from lmpo.config import load_config, to_dict
    from lmpo.errors import ConfigError
    from lmpo.trainer.resume import check_resumable
    from lmpo.trainer.train_config import TrainConfig

    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(to_dict(load_config(TrainConfig, "grpo", ["device=cpu"]))))
    auto = load_config(TrainConfig, "grpo")
    assert auto.device == "auto"
    check_resumable(saved, auto)
    with pytest.raises(ConfigError, match="device: 'cpu' -> 'cuda'"):
        check_resumable(saved, load_config(TrainConfig, "grpo", ["device=cuda"]))
