"""The Ray launcher against the local pool, on the same sweep on this machine: per-step
time, wall time, rows and how each run's process was configured.

One tiny experiment (a random nano policy, GRPO and CE-GPPO, `--seeds` seeds, `--steps`
steps) is run three times into fresh directories: by the local pool (`lmpo compare --jobs
J`); by the pool again with an idle local Ray running beside it (Ray's own processes, the
part of Ray's cost that is not the launch path); and by `--launcher ray` with no address
(a local Ray started and stopped by the sweep, its start counted in the wall time). With
`--beside T` a CPU-bound torch process of T threads runs beside all three, as another
user's job would on a shared node: that is where a run at a higher niceness than the
pool's loses most of its CPU.

Printed and written to results/: the per-step ratio (ray / pool) of the median over runs
of each run's median `time/step` (TRL's runs: `trl/step_time`) after its first step, read
from the rows themselves, and the same for the pool beside an idle Ray; the wall-time
ratio; whether the sweeps wrote the same metrics rows (timings aside); and whether every
run's `process.json` (torch threads, CPU affinity, niceness, thread environment) is the
same under both launchers.

    python benchmarks/ray_overhead.py               # 2 arms x 2 seeds x 20 steps, jobs 1, beside 2
    python benchmarks/ray_overhead.py --engine trl  # the same through TRL (its environment)
    python benchmarks/ray_overhead.py --smoke       # seconds: the smoke test's size
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import write_result

BASE = {"rollout": {"batch_size": 16, "pool_size": 64, "max_new_tokens": 8},
        "log": {"eval_per_tier": 4, "eval_every": 10, "tensorboard": False,
                "eval_max_new_tokens": 8, "checkpoint_every": 10}}
BUSY = """import sys, torch
torch.set_num_threads(int(sys.argv[1]))
a = torch.randn(384, 384)
while True:
    a = (a @ a).tanh()
"""


def rows(out: Path) -> dict:
    from lmpo.trainer.checkpoint import untimed_rows

    return {str(p.relative_to(out)): untimed_rows(p)
            for p in sorted((out / "runs").glob("*/seed*/metrics.jsonl"))}


def step_time(out: Path) -> float:
    """The median over runs of each run's median `time/step` (TRL's `trl/step_time`) after
    its first step."""
    per_run = []
    for path in sorted((out / "runs").glob("*/seed*/metrics.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        steps = [r["time/step"] if "time/step" in r else r["trl/step_time"] for r in rows]
        per_run.append(statistics.median(steps[1:] or steps))
    return statistics.median(per_run)


def processes(out: Path) -> dict:
    from lmpo.process_env import PROCESS_FILE, comparable

    return {str(p.parent.relative_to(out)): comparable(json.loads(p.read_text()))
            for p in sorted((out / "runs").glob(f"*/seed*/{PROCESS_FILE}"))}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--beside", type=int, default=2,
                        help="threads of a busy process running beside both sweeps (0: none)")
    parser.add_argument("--engine", choices=("lmpo", "trl"), default="lmpo")
    parser.add_argument("--smoke", action="store_true", help="1 seed x 3 steps")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.seeds = 3, 1
    os.environ.pop("RAY_ADDRESS", None)
    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.run.sweep import compare
    from lmpo.models import build_policy, build_tokenizer, save_policy

    busy = subprocess.Popen([sys.executable, "-c", BUSY, str(args.beside)]) \
        if args.beside else None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            tok = build_tokenizer()
            save_policy(build_policy("nano", tok, seed=0), tok, tmp / "policy")
            data = {"base": BASE | {"policy": str(tmp / "policy")},
                    "arms": {"grpo": {"preset": "grpo"}, "cegppo": {"preset": "cegppo"}},
                    "seeds": args.seeds, "steps": args.steps, "differs_in": ["loss"],
                    "claims": []}
            (tmp / "exp.yaml").write_text("# ray_overhead\n" + yaml.safe_dump(data))
            walls, steps = {}, {}
            for name in ("pool", "pool_ray_idle", "ray"):
                exp = load_experiment(tmp / "exp.yaml")
                idle = name == "pool_ray_idle"
                if idle:  # Ray's own processes beside, doing nothing for the sweep
                    import ray

                    ray.init(num_cpus=os.cpu_count(), include_dashboard=False,
                             log_to_driver=False, configure_logging=False,
                             _system_config={"worker_niceness": 0})
                t0 = time.perf_counter()
                try:
                    rc = compare(exp, tmp / name, jobs=args.jobs, live=False,
                                 launcher_name="pool" if idle else name, engine=args.engine)
                finally:
                    if idle:
                        ray.shutdown()
                walls[name] = time.perf_counter() - t0
                if rc != 0:
                    print(f"the {name} sweep failed", file=sys.stderr)
                    return 1
                steps[name] = step_time(tmp / name)
            same = rows(tmp / "pool") == rows(tmp / "ray")
            seen = {launcher: processes(tmp / launcher) for launcher in ("pool", "ray")}
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
    same_process = seen["pool"] == seen["ray"] and len(seen["pool"]) == 2 * args.seeds
    runs = 2 * args.seeds
    step_ratio, wall_ratio = steps["ray"] / steps["pool"], walls["ray"] / walls["pool"]
    idle_ratio = steps["pool_ray_idle"] / steps["pool"]
    print(f"{runs} {args.engine} runs x {args.steps} steps, jobs {args.jobs}, a {args.beside}-"
          f"thread busy process beside: time/step pool {steps['pool']:.3f} s, pool beside an "
          f"idle Ray {steps['pool_ray_idle']:.3f} s ({idle_ratio:.3f}x), ray "
          f"{steps['ray']:.3f} s, ray / pool {step_ratio:.3f}; wall pool {walls['pool']:.1f} s, "
          f"ray {walls['ray']:.1f} s, ray / pool {wall_ratio:.3f}; same rows: {same}; same "
          f"process settings: {same_process}")
    name = "ray_overhead" + ("_trl" if args.engine == "trl" else "") + \
        ("" if args.beside else "_quiet")
    write_result(name, {
        "engine": args.engine, "runs": runs, "steps": args.steps, "jobs": args.jobs,
        "beside_threads": args.beside, "pool_step_s": steps["pool"], "ray_step_s": steps["ray"],
        "ray_over_pool_step": step_ratio, "pool_ray_idle_step_s": steps["pool_ray_idle"],
        "pool_ray_idle_over_pool_step": idle_ratio, "pool_wall_s": walls["pool"],
        "ray_wall_s": walls["ray"], "ray_over_pool_wall": wall_ratio, "same_rows": same,
        "same_process": same_process, "process": seen["ray"]},
        threads=os.cpu_count() // args.jobs)
    return 0 if same and same_process else 1


if __name__ == "__main__":
    sys.exit(main())
