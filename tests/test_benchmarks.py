"""Every benchmark script runs: each at its smallest size, in seconds, writing its JSON to a
scratch folder (never the committed results), whose shape is checked here. The TRL
benchmarks are smoke-tested in their own environment (tests/test_benchmarks_trl.py), the
Ray one in Ray's (tests/test_ray.py), and this file fails if a script appears that none
covers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parent.parent / "benchmarks"
# helpers, not benchmarks: no command of their own
HELPERS = {"common.py", "bench_reward.py"}
TRL_SCRIPTS = {"vs_trl.py", "rm_vs_trl.py"}  # tests/test_benchmarks_trl.py
RAY_SCRIPTS = {"ray_overhead.py"}  # tests/test_ray.py (Ray's environment)


def run_script(argv: list[str], out: Path, home: Path, timeout: int = 240) -> None:
    env = os.environ | {"LMPO_BENCH_RESULTS": str(out), "LMPO_HOME": str(home)}
    done = subprocess.run(argv, cwd=BENCH, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def run_in_process(name: str, args: list[str], out: Path, home: Path, monkeypatch) -> None:
    """`python NAME.py ARGS` from benchmarks/, in this process (a new interpreter costs ~8 s
    of imports per script): the same argv, working directory and environment; the script's
    modules are dropped afterwards (`common` reads LMPO_BENCH_RESULTS on import) and torch's
    thread count is restored."""
    import runpy

    import torch

    monkeypatch.setenv("LMPO_BENCH_RESULTS", str(out))
    monkeypatch.setenv("LMPO_HOME", str(home))
    monkeypatch.chdir(BENCH)
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *args])
    monkeypatch.syspath_prepend(str(BENCH))
    threads = torch.get_num_threads()
    try:
        runpy.run_path(str(BENCH / f"{name}.py"), run_name="__main__")
    except SystemExit as exc:
        assert exc.code in (None, 0), f"{name}.py exited with {exc.code!r}"
    finally:
        torch.set_num_threads(threads)
        for mod in [k for k, v in sys.modules.items()
                    if str(getattr(v, "__file__", None) or "").startswith(str(BENCH))]:
            del sys.modules[mod]


def bench(name: str, *args: str, out: Path, home: Path, monkeypatch=None) -> dict:
    if monkeypatch is None:
        run_script([sys.executable, f"{name}.py", *args], out, home)
    else:
        run_in_process(name, list(args), out, home, monkeypatch)
    files = list(out.glob("*.json"))
    assert len(files) == 1, files
    result = json.loads(files[0].read_text())
    assert {"command", "commit", "machine"} <= set(result)  # provenance of every result
    assert result["command"].startswith(f"python benchmarks/{name}.py")
    return result


def cases(tiny: str) -> dict[str, tuple[list[str], object]]:
    """script -> (smallest arguments, check of its JSON)."""
    def rows_with(*keys):
        return lambda r: r["rows"] and all(set(keys) <= set(row) for row in r["rows"])

    return {
        "condition_cost": (["--steps", "2", "--rounds", "1", "--policy", tiny,
                            "--corrections", "tis", "mis"],
                           lambda r: {"plain", "fp8_e4m3", "correction_tis"} <= set(r["results"])
                           and all(v["seconds"] > 0 for v in r["correction_own"].values())),
        "logprobs_memory": (["--rows", "32", "--vocab", "300", "--repeats", "1"],
                            rows_with("memory_ratio", "time_ratio")),
        "oracle_savings": (["--policy", tiny, "--tiers", "t7d1", "--prompts", "2", "--group",
                            "2", "--max-new-tokens", "8"],
                           lambda r: 0 <= r["oracle_savings"] <= 1 and "t7d1" in r["per_tier"]),
        "real_sampling": (["--policy", tiny, "--prompts", "2", "--group", "2",
                           "--max-new-tokens", "4", "--repeats", "1"],
                          rows_with("lmpo_vs_generate_fp32", "bf16_logp_mismatch_mean")),
        "rollout_mismatch": (["--policy", tiny, "--prompts", "2", "--group", "2",
                              "--max-new-tokens", "4", "--stale", "1"],
                             lambda r: "bfloat16" in json.dumps(r["variants"])
                             and r["results"]["nano-chain-sum"]["fp4_e2m1_stale1"]["mean"]
                             > 0 and r["results"]["nano-chain-sum"]["mxfp8"]["full_tv"] > 0),
        "rollout_speed": (["--sizes", "nano", "--nano-policy", "none", "--batches", "4",
                           "--max-new-tokens", "4", "--repeats", "1"],
                          rows_with("lmpo_vs_generate", "regret_cost")),
        "score_centering_bias": (["--policy", tiny, "--prompts", "2", "--group", "2",
                                  "--max-new-tokens", "4", "--ks", "1", "4", "--repeats", "1"],
                                 lambda r: len(r["rows"]) == 4 and r["cost"]["ratio"] > 0
                                 and all(0 < row["head_mass"] <= 1 for row in r["rows"])),
        "step_overhead": (["--policy", tiny, "--steps", "3", "--warmup", "1"],
                          lambda r: r["ratio"] > 0 and r["measured_steps"] == 2),
        "shadow_cost": (["--policy", tiny, "--steps", "2", "--repeats", "1"],
                        lambda r: set(r["variants"]) == {"none", "loss",
                                                         "loss+estimator+controller",
                                                         "loss+grad_cos"}
                        and r["variants"]["none"]["ratio"] == 1.0),
        "real_step": (["--steps", "2", "--repeats", "1", "--set", f"policy={tiny}",
                       "prompt_format=raw", "system_prompt=null", "rollout.max_new_tokens=6",
                       "log.eval_max_new_tokens=4", "log.eval_per_tier=2", "log.eval_samples=1",
                       "rollout.batch_size=4", "rollout.group_size=2",
                       "optim.micro_batch_size=4"],
                      lambda r: [(x["dtype"], x["variant"]) for x in r["rows"]] == [
                          ("bfloat16", "before"), ("bfloat16", "lmpo"), ("float32", "before"),
                          ("float32", "lmpo")]
                      and all(x["floor_s"] > 0 and len(x["steps"]) == 2
                              and x["steps"][0]["phases_s"]["update_backward"] > 0
                              for x in r["rows"])),
        "real_run": (["--repeats", "1", "--set", f"policy={tiny}", "prompt_format=raw",
                      "system_prompt=null", "steps=2", "rollout.max_new_tokens=6",
                      "log.eval_every=1", "log.eval_max_new_tokens=4", "log.eval_per_tier=2",
                      "log.eval_samples=1", "rollout.batch_size=4", "rollout.group_size=2",
                      "optim.micro_batch_size=4"],
                     lambda r: r["steps"] == 2 and len(r["evaluations"]) == 3
                     and all(e["floor_s"] > 0 and e["completions"] > 0
                             for e in r["evaluations"])
                     and all(s["floor_s"] > 0 and s["phases_s"]["update_backward"] > 0
                             for s in r["per_step"])
                     and r["wall_s"] > r["steps_s"] + r["evaluations_s"]),
        "busy_threads": (["--policy", tiny, "--small", "--states", "busy", "--work", "train",
                          "--waits", "auto", "--threads", "2"],
                         lambda r: [(x["work"], x["busy_core"], x["wait"]) for x in r["rows"]]
                         == [("train", True, "auto")] and r["rows"][0]["seconds"] > 0),
        "flop_floor": (["--smoke", "--steps", "1", "--repeats", "1", "--profile"],
                       lambda r: rows_with("ratio", "floor_s", "step_s", "tflop",
                                           "profile_s")(r)
                       and all(x["profile_s"]["products"] > 0 for x in r["rows"])),
    }


def test_every_benchmark_script_has_a_smoke_test():
    scripts = {p.name for p in BENCH.glob("*.py")} - HELPERS
    covered = {f"{n}.py" for n in cases("x")} | TRL_SCRIPTS | RAY_SCRIPTS | {"gpu_check.py"}
    assert scripts == covered, scripts ^ covered


@pytest.mark.parametrize("name", sorted(cases("x")))
def test_benchmark_smoke(name, tiny_policy_dir, tmp_path, monkeypatch):
    args, check = cases(str(tiny_policy_dir))[name]
    result = bench(name, *args, out=tmp_path / "out", home=tmp_path / "home",
                   monkeypatch=monkeypatch)
    assert check(result), json.dumps(result)[:2000]


def test_flop_floor_counts_the_flops_it_times(tiny_policy_dir, tmp_path):
    """The smoke sizes' analytic FLOPs: 2 x rows x in x out per linear, summed by hand."""
    sys.path.insert(0, str(BENCH))
    try:
        from common import Floor
        from flop_floor import SMOKE, phases
    finally:
        sys.path.remove(str(BENCH))
    c, prompts, group, p, t = SMOKE["nano"]
    fl = Floor(c, None, 1)
    got = phases(fl, fl.flops, prompts, group, p, t)
    d, f, L, V = 96, 256, 4, 88
    per_token = 2 * (4 * d * d + 3 * d * f) * L  # q, k, v, o (4 kv heads = d) and the MLP
    attn = lambda rows, ctx: 4 * rows * ctx * d * L  # noqa: E731  QK^T and AV
    prompt = prompts * p * per_token + attn(prompts * p, (p + 1) / 2) + 2 * prompts * d * V
    assert got["prompt"] == pytest.approx(prompt, rel=1e-12)
    b = prompts * group
    decode = sum(b * per_token + attn(b, p + i + 1) + 2 * b * d * V for i in range(t - 1))
    assert got["decode"] == pytest.approx(decode, rel=1e-12)
    fwd = prompt + b * t * per_token + attn(b * t, p + (t + 1) / 2) + 2 * b * t * d * V
    assert got["update_forward"] == pytest.approx(fwd, rel=1e-12)
    assert got["update_backward"] == pytest.approx(2 * fwd, rel=1e-12)


def test_gpu_check_dry_run(tmp_path):
    """The GPU check's code path on the CPU at tiny sizes (no wheels): its JSON has the
    machine, sampling vs generate, the RL step in both precisions and the testbed, trained
    by `lmpo train` and evaluated by `lmpo eval --device`."""
    out = tmp_path / "gpu"
    # PYTHON unset and no environment on PATH: the script finds the project's .venv
    # (where this suite runs, unless another interpreter was named)
    project_venv = Path(sys.prefix).resolve() == (BENCH.parent / ".venv").resolve()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VIRTUAL_ENV")}
    env |= {"PATH": "/usr/bin:/bin", "LMPO_HOME": str(tmp_path / "h")}
    if not project_venv:
        env["PYTHON"] = sys.executable
    done = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--dry-run", str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["dry_run"] is True and {"python", "torch"} <= set(result["machine"])
    assert result["sampling"]["lmpo_vs_generate_fp32"] > 0
    assert [r["dtype"] for r in result["rl_step"]] == ["float32", "bfloat16"]
    assert result["testbed"]["steps"] == 2 and result["testbed"]["time_per_step_s"] > 0
    assert 0 <= result["testbed"]["lmpo_eval_accuracy_trained"] <= 1  # lmpo eval ran
    assert result["testbed"]["lmpo_eval_seconds"] > 0
    assert not (tmp_path / "h" / "policies").exists()  # the tiny warm start stayed in scratch
