"""Nothing lost, nothing corrupted: locked run and sweep directories, a damaged newest
checkpoint falls back to the one before, a failed write says what it is and from where to
resume, and every bad input is one line with exit code 2 and nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from lmpo.cli import main
from lmpo.config import load_config
from lmpo.errors import LockedError
from lmpo.locks import directory_lock
from lmpo.trainer.checkpoint import (
    CheckpointError,
    latest_intact_checkpoint,
    list_checkpoints,
    read_rows,
)
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

TINY = ["rollout.batch_size=8", "rollout.max_new_tokens=6", "rollout.pool_size=64",
        "log.eval_per_tier=2", "log.eval_max_new_tokens=4", "log.tensorboard=false",
        "log.eval_every=100", "log.checkpoint_every=1"]


def tiny(policy, *extra, preset="grpo"):
    return load_config(TrainConfig, preset, [f"policy={policy}", *TINY, *extra])


def one_line_error(capsys) -> str:
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1, err
    return err[0]


# ---------------------------------------------------------------- locks
def hold_in_another_process(directory: Path) -> subprocess.Popen:
    code = ("import sys; from lmpo.locks import directory_lock\n"
            f"with directory_lock({str(directory)!r}, what='lmpo train'):\n"
            "    print('held', flush=True); sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_directory_in_use_is_refused_naming_the_holder_then_taken_over(
        tiny_policy_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    holder = hold_in_another_process(run_dir)
    try:
        args = ["train", "--config", "grpo", "--run-dir", str(run_dir), "--quiet", "--steps",
                "1", f"policy={tiny_policy_dir}", *TINY]
        assert main(args) == 2
        line = one_line_error(capsys)
        assert f"{run_dir} is in use by another lmpo process (lmpo train, pid {holder.pid}" \
            in line and " since " in line
        assert not (run_dir / "metrics.jsonl").exists()
    finally:
        holder.kill()  # as abruptly as a crash: the holder never cleans up
        holder.wait()
    assert main(args) == 0
    err = capsys.readouterr().err
    assert f"took over the lock of lmpo train, pid {holder.pid}" in err
    assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")] == [1]
    with directory_lock(run_dir, what="test", notice=pytest.fail):  # released cleanly
        with pytest.raises(LockedError, match=r"in use by another lmpo process \(test, pid"):
            with directory_lock(run_dir, what="second"):
                pass


def test_two_sweeps_on_one_directory_one_runs_the_other_is_refused(tiny_policy_dir,
                                                                   tmp_path):
    """Two `lmpo compare` started together on the same --out: one runs every run to the
    end with exactly its rows, the other fails at once naming it (before: both ran the
    same runs, and rows were duplicated)."""
    exp = {"base": {"policy": str(tiny_policy_dir), "rollout": {"batch_size": 8,
                    "max_new_tokens": 6, "pool_size": 64},
                    "log": {"eval_per_tier": 2, "eval_max_new_tokens": 4, "eval_every": 100,
                            "tensorboard": False}},
           "arms": {"grpo": {"preset": "grpo"}}, "seeds": 1, "steps": 3,
           "differs_in": ["loss"]}
    (tmp_path / "exp.yaml").write_text("# two sweeps\n" + yaml.safe_dump(exp))
    cmd = [sys.executable, "-m", "lmpo", "compare", "--config", "exp.yaml", "--out", "out"]
    procs = [subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outs
    refused = outs[[p.returncode for p in procs].index(2)][1]
    assert "is in use by another lmpo process (lmpo compare, pid" in refused
    rows = read_rows(tmp_path / "out/runs/grpo/seed0/metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]


# ---------------------------------------------------------------- checkpoints
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tiny_policy_dir, tmp_path,
                                                                  capsys):
    full, part = tmp_path / "full", tmp_path / "part"
    train(tiny(tiny_policy_dir, "steps=4", "log.keep_checkpoints=2"), full, progress=False)
    train(tiny(tiny_policy_dir, "steps=3", "log.keep_checkpoints=2"), part, progress=False)
    newest = list_checkpoints(part)[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # truncated
    capsys.readouterr()
    train(tiny(tiny_policy_dir, "steps=4", "log.keep_checkpoints=2"), part, resume=True,
          progress=False)
    notice = capsys.readouterr().out
    assert "resuming from ckpt-000002.pt (step 2): the newer ckpt-000003.pt" in notice
    assert "bytes where" in notice and "were written" in notice

    def same(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "eval/"))}
                for r in rows]

    assert same(read_rows(part / "metrics.jsonl")) == same(read_rows(full / "metrics.jsonl"))
    for ckpt in list_checkpoints(part):  # every checkpoint left is whole again
        ckpt.write_bytes(b"PK\x03\x04 not a zip at all")
    with pytest.raises(CheckpointError, match=r"no intact checkpoint in .*: ckpt-000004.pt "
                                              r"\(.*\); ckpt-000003.pt \(.*\); start the run"):
        latest_intact_checkpoint(part)


def test_a_checkpoint_of_foreign_objects_is_still_refused_as_such(tmp_path):
    import torch

    from lmpo.trainer.checkpoint import load_checkpoint

    path = tmp_path / "ckpt-000001.pt"
    torch.save({"obj": Path("/")}, path)
    with pytest.raises(CheckpointError, match="holds objects other than tensors"):
        load_checkpoint(path)


def test_a_file_size_limit_while_checkpointing_is_one_line_and_leaves_nothing_half_written(
        tiny_policy_dir, tmp_path):
    """A real write failure: the run's process may write at most 3 MB per file (the nano
    policy's checkpoint is ~5 MB), as a nearly full disk would stop it."""
    run_dir = tmp_path / "run"
    code = textwrap.dedent(f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_FSIZE, (3_000_000, 3_000_000))
        from lmpo.cli import main
        sys.exit(main({["train", "--config", "grpo", "--run-dir", str(run_dir), "--quiet",
                        "--steps", "2", f"policy={tiny_policy_dir}", *TINY]!r}))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    err = [x for x in run.stderr.splitlines() if x.startswith("lmpo ")]
    assert run.returncode == 1 and len(err) == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert f"could not write checkpoint {run_dir}/checkpoints/ckpt-000001.pt: File too large" \
        in err[0] and "no checkpoint was written yet: start the run again" in err[0]
    assert not any((run_dir / "checkpoints").iterdir())  # no .tmp, no record, no checkpoint


def test_disk_full_while_checkpointing_says_so_and_names_the_step_to_resume_from(
        tiny_policy_dir, tmp_path, monkeypatch, capsys):
    """torch's zip writer reports a full disk as 'unexpected pos'; the OS error behind it
    is kept and reported, and the run resumes from the newest intact checkpoint."""
    import errno

    import lmpo.trainer.checkpoint as ck

    real, calls = ck.torch.save, []

    def full_on_the_third(obj, f):
        calls.append(1)
        if len(calls) == 3:
            f.write(b"x" * 100)  # a partial write, then the device is full
            raise_in = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            f.error = raise_in
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos")
        return real(obj, f)

    monkeypatch.setattr(ck.torch, "save", full_on_the_third)
    run_dir = tmp_path / "run"
    args = ["train", "--config", "grpo", "--run-dir", str(run_dir), "--quiet", "--steps", "4",
            f"policy={tiny_policy_dir}", *TINY]
    assert main(args) == 1
    line = one_line_error(capsys)
    assert f"could not write checkpoint {run_dir}/checkpoints/ckpt-000003.pt: No space left " \
           "on device (" in line and "resume from step 2 with --resume" in line
    assert [p.name for p in sorted((run_dir / "checkpoints").iterdir())] == [
        "ckpt-000001.pt", "ckpt-000001.pt.json", "ckpt-000002.pt", "ckpt-000002.pt.json"]
    monkeypatch.setattr(ck.torch, "save", real)
    assert main([*args, "--resume"]) == 0
    assert [r["step"] for r in read_rows(run_dir / "metrics.jsonl")] == [1, 2, 3, 4]


# ---------------------------------------------------------------- bad input: one line
def write(tmp_path, name, text) -> str:
    (tmp_path / name).write_text(textwrap.dedent(text))
    return str(tmp_path / name)


def bad_inputs(tmp_path, policy) -> list[tuple[list[str], str]]:
    """(argv, what the one line says) for each verb; run dirs and outputs are fresh."""
    bad_jsonl = write(tmp_path, "bad.jsonl", '{"prompt": "1+1=", "answer": "2"}\n'
                                             '{"prompt": "2+2="}\n')
    raising = write(tmp_path, "raising.py", """
        def reward(prompts, completions, answers, **meta):
            raise ValueError("cannot score this one")
    """)
    nan_fn = write(tmp_path, "nan.py", """
        def reward(prompts, completions, answers, **meta):
            return [float("nan")] * len(prompts)
    """)
    bad_exp = write(tmp_path, "exp.yaml", "arms: {a: {preset: grpo}}\nsteps: 2\n"
                                          "differs_in: []\nclaims: []\nwhatever: 1\n")
    bad_pairs = write(tmp_path, "pairs.jsonl", '{"prompt": "a", "chosen": "b"}\n')
    run = ["train", "--config", "grpo", "--run-dir", str(tmp_path / "fresh"), "--quiet",
           f"policy={policy}", *TINY, "--steps", "1"]
    return [
        (["train", "--config", "grpoo", "--run-dir", str(tmp_path / "fresh")],
         "unknown train preset 'grpoo' (did you mean 'grpo'?)"),
        ([*run, "optim.lr=-1e-4"], "optim.lr must be > 0"),
        ([*run, "optim.lr=nan"], "optim.lr must be a finite number, got nan"),
        ([*run, "rollout.batch_size=10"], "not divisible by rollout.group_size"),
        ([*run, "rollout.temperature=0"], "rollout.temperature must be > 0"),
        ([*run, "loss.name=cegpo"], "did you mean 'cegppo'"),
        ([*run, "loss.hparams={eps_low: 2}"], "eps_low=2 is outside its domain (0, 1]"),
        ([*run, "reward.fn=nowhere.py:reward"], "nowhere.py"),
        ([*run[:-3], "policy=/nonexistent/policy", *TINY, "--steps", "1"],
         "is neither a Hugging Face model folder"),
        ([*run, f"task={bad_jsonl}", "rollout.clusters=null"],
         "bad.jsonl:2: missing required field(s) ['answer']"),
        ([*run, f"task={bad_jsonl}"], "the built-in testbed's values (from a "
                                      "shipped preset or the defaults) would apply: "
                                      "rollout.clusters=['t3d1']; set each"),
        ([*run, f"reward.fn={raising}:reward"], "cannot score this one on held-out problem 0"),
        ([*run, f"reward.fn={nan_fn}:reward"],
         "returned nan (not a finite number within +-1e+06, or None)"),
        ([*run, "espo.beta=1"], "config key 'espo' was replaced by `controller"),
        ([*run, "controller={name: espo}"], "needs the critic's per-step values"),
        ([*run, "rollout.dtype=fp4"], "rollout.dtype 'fp4' unknown; valid: float32, "
                                      "bfloat16, float16, fp8_e4m3"),
        ([*run, "rollout.correction.kind=tiss"], "unknown rollout.correction.kind 'tiss' "
                                                 "(did you mean 'tis'?); valid: icepop, m2po, mis"),
        ([*run, "rollout.staleness=-1"], "rollout.staleness must be >= 0, got -1"),
        ([*run, "reward.model=builtin", "reward.scale=pm1"], "not a reward model's"),
        ([*run, "rollout.correction={kind: icepop, hparams: {lower: -1}}"],
         "rollout.correction: rollout correction 'icepop': lower=-1 is outside its domain "
         "(0, inf)"),
        (["eval", "--run", str(tmp_path / "no-run")], "is not a run directory"),
        (["eval", "--model", "/nonexistent/model"], "is neither a Hugging Face model folder"),
        (["eval", "--model", str(policy), "--task", "chain_summ"], "unknown task 'chain_summ'"),
        (["compare", "--config", str(tmp_path / "none.yaml"), "--out", str(tmp_path / "o")],
         "does not exist"),
        (["compare", "--config", bad_exp, "--out", str(tmp_path / "o")],
         "unknown experiment key(s) ['whatever']"),
        (["compare", "--config", "demo", "--out", str(tmp_path / "o"), "--jobs", "0"],
         "--jobs must be >= 1"),
        (["report", str(tmp_path / "o")], "is not a `lmpo compare` directory"),
        (["sft", "--out", str(tmp_path / "fresh"), "stepz=3"], "unknown config key 'stepz'"),
        (["rm", "--out", str(tmp_path / "fresh"), f"pairs={bad_pairs}"],
         "pairs.jsonl:1: missing required field(s) ['rejected']"),
        (["methods", "--readme", str(tmp_path / "NOREADME.md")], "does not exist"),
    ]


def test_every_bad_input_is_one_line_with_exit_code_2_and_leaves_nothing(tiny_policy_dir,
                                                                        tmp_path, capsys):
    for argv, says in bad_inputs(tmp_path, tiny_policy_dir):
        rc = main(argv)
        line = one_line_error(capsys)
        assert rc == 2, (argv, line)
        assert says in line, (argv, line)
        assert line.startswith(f"lmpo {argv[0]}: error: "), line
        for fresh in ("fresh", "o"):
            assert not (tmp_path / fresh).exists(), (argv, fresh)


# ---------------------------------------------------------------- the config surface, fuzzed
def schema_keys() -> list[str]:
    """Every leaf key of the train config, dotted."""
    import dataclasses

    def walk(obj, prefix=""):
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                yield from walk(value, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"

    return sorted(walk(TrainConfig()))


POOL = ["-1", "0", "1", "2", "0.5", "1e9", "-1e-9", "nan", "inf", "''", "x", "null", "[]",
        "{}", "true", "[t3d1]", "{alpha: 2}", "ppo_clip", "gae", "espo", "float16"]
SKIP = {"policy", "imports", "steps", "threads", "device", "reward.model", "task"}


def test_random_overrides_fail_in_one_line_before_any_file_or_run_one_step(tiny_policy_dir,
                                                                           tmp_path):
    """Random overrides of the config's keys with bad and edge values, in-process: each
    either fails with one LmpoError line before anything is written, or runs a step."""
    import random
    import time

    from lmpo.errors import LmpoError

    keys = [k for k in schema_keys() if k not in SKIP and not k.startswith("log.tensor")]
    rng, start, ran, refused = random.Random(0), time.perf_counter(), 0, 0
    for case in range(400):  # refusals take ms: draws enough valid ones in the time
        if time.perf_counter() - start > 25:
            break
        overrides = [f"{key}={rng.choice(POOL)}" for key in rng.sample(keys, rng.randint(1, 3))]
        run_dir = tmp_path / f"run{case}"
        try:
            cfg = tiny(tiny_policy_dir, "steps=1", "log.checkpoint_every=1", *overrides)
            train(cfg, run_dir, progress=False)
            ran += 1
        except LmpoError as exc:
            refused += 1
            assert "\n" not in str(exc), overrides
            assert not run_dir.exists(), (overrides, str(exc))
    assert ran >= 3 and refused >= 20, (ran, refused)
    print(f"config fuzz: {ran} ran a step, {refused} refused in one line")
