"""The Ray launcher's overhead against the local pool, on the same sweep on this machine.

One tiny experiment (a random nano policy, GRPO and CE-GPPO, `--seeds` seeds, `--steps`
steps) is run twice into fresh directories: by the local pool (`lmpo compare --jobs J`)
and by `--launcher ray` with no address (a local Ray started and stopped by the sweep,
its start counted). Both wall times are printed with their ratio, and whether the two
sweeps wrote the same metrics rows (timings aside).

    python benchmarks/ray_overhead.py               # 2 arms x 4 seeds x 40 steps, jobs 2
    python benchmarks/ray_overhead.py --smoke       # seconds: the smoke test's size
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml
from common import write_result

BASE = {"rollout": {"batch_size": 16, "pool_size": 64, "max_new_tokens": 8},
        "log": {"eval_per_tier": 4, "eval_every": 10, "tensorboard": False,
                "eval_max_new_tokens": 8, "checkpoint_every": 10}}


def rows(out: Path) -> dict:
    from lmpo.trainer.checkpoint import untimed_rows

    return {str(p.relative_to(out)): untimed_rows(p)
            for p in sorted((out / "runs").glob("*/seed*/metrics.jsonl"))}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="1 seed x 2 steps")
    args = parser.parse_args()
    if args.smoke:
        args.steps, args.seeds = 2, 1
    os.environ.pop("RAY_ADDRESS", None)
    from lmpo.experiments.spec import load_experiment
    from lmpo.experiments.sweep import compare
    from lmpo.models import build_policy, build_tokenizer, save_policy

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tok = build_tokenizer()
        save_policy(build_policy("nano", tok, seed=0), tok, tmp / "policy")
        data = {"base": BASE | {"policy": str(tmp / "policy")},
                "arms": {"grpo": {"preset": "grpo"}, "cegppo": {"preset": "cegppo"}},
                "seeds": args.seeds, "steps": args.steps, "differs_in": ["loss"],
                "claims": []}
        (tmp / "exp.yaml").write_text("# ray_overhead\n" + yaml.safe_dump(data))
        walls = {}
        for launcher in ("pool", "ray"):
            exp = load_experiment(tmp / "exp.yaml")
            t0 = time.perf_counter()
            rc = compare(exp, tmp / launcher, jobs=args.jobs, live=False,
                         launcher_name=launcher)
            walls[launcher] = time.perf_counter() - t0
            if rc != 0:
                print(f"the {launcher} sweep failed", file=sys.stderr)
                return 1
        same = rows(tmp / "pool") == rows(tmp / "ray")
    runs = 2 * args.seeds
    ratio = walls["ray"] / walls["pool"]
    print(f"{runs} runs x {args.steps} steps, jobs {args.jobs}: pool {walls['pool']:.1f} s, "
          f"ray {walls['ray']:.1f} s, ray / pool {ratio:.3f}; same rows: {same}")
    write_result("ray_overhead", {
        "runs": runs, "steps": args.steps, "jobs": args.jobs,
        "pool_wall_s": walls["pool"], "ray_wall_s": walls["ray"], "ray_over_pool": ratio,
        "overhead_share": ratio - 1, "same_rows": same}, threads=os.cpu_count() // args.jobs)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
