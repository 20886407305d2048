"""Where the noise of an accuracy comparison comes from: training seeds or evaluation
sampling, and what per-problem common random numbers (CRN) remove.

Every final policy of two arms of a finished sweep is evaluated again on its run's
held-out set, `--replicates` times with the old shared stream and as many with
per-problem streams (each replicate its own stream seed: an independent redraw of the
evaluation with the policies fixed). Per stream kind, for the paired difference of the
arms on the run's accuracy metric:

- sampling: the variance of d over replicates within a seed (averaged over seeds): the
  evaluation's own noise, measured directly;
- estimate: the within-seed variance the reports estimate from ONE evaluation's
  per-sample records (lmpo.experiments.report.components), averaged over replicates: it
  should match `sampling` under per-problem streams;
- seed: the variance over seeds of the replicate-mean d, less sampling / replicates;
- the MDE at the sweep's seed count for one evaluation per run, and the allocation the
  same compute would buy (lmpo.experiments.report.components.allocations).

Writes the records (one file, compact) and the summary as JSON.

    python experiments/noise.py --sweep experiments/results/noise_drpo/sweep \
        --arms drpo grpo_rc --out experiments/results/noise_drpo/noise.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from lmpo.evaluate import EVAL_SAMPLE_SEED, evaluate
from lmpo.experiments.report.components import allocations, costs, seed_terms, split, weights
from lmpo.experiments.report.write import collect
from lmpo.experiments.stats.seeds import LEVEL
from lmpo.models import load_policy
from lmpo.tasks import get_task
from lmpo.tasks.heldout import heldout_split
from lmpo.trainer.resume import load_run_config
from lmpo.trainer.runtime import Runtime

STREAMS = ("shared", "per_problem")
CLAIM = {"kind": "direction", "expect": "greater"}


def evaluations(run_dir: Path, replicates: int) -> dict[str, list[dict]]:
    """{stream: [records of each replicate]} of the run's final policy."""
    cfg = load_run_config(run_dir / "config.yaml")
    policy, tok = load_policy(run_dir / "policy")
    task = get_task(cfg.task, cfg.task_params or None)
    rt = Runtime.build(cfg, policy, tok, task, progress=False)
    problems = heldout_split(task, cfg.log.eval_per_tier).problems
    out = {}
    for stream in STREAMS:
        out[stream] = []
        for r in range(replicates):
            result = evaluate(policy, tok, task, problems,
                              max_new_tokens=cfg.log.eval_max_new_tokens,
                              trained_tiers=cfg.rollout.clusters,
                              temperature=cfg.log.eval_temperature,
                              samples=cfg.log.eval_samples, reward=rt.reward,
                              encode=rt.encode, eos_ids=rt.stop_ids, stream=stream,
                              stream_seed=EVAL_SAMPLE_SEED + r)
            out[stream].append(result["records"])
    return out


def summary(records: dict, seeds: list[int], arms: list[str], metric: str,
            trained: list[str] | None, cost: dict) -> dict:
    a, b = arms
    first = records[a][seeds[0]]["shared"][0]
    w = weights(first, metric, trained)
    out = {}
    for stream in STREAMS:
        reps = len(records[a][seeds[0]][stream])
        d = np.array([[seed_terms(records[a][s][stream][r], records[b][s][stream][r], w)[0]
                       for r in range(reps)] for s in seeds])
        sampling = float(d.var(axis=1, ddof=1).mean())
        seed = max(0.0, float(d.mean(axis=1).var(ddof=1)) - sampling / reps)
        estimate = float(np.mean([split([(records[a][s][stream][r], records[b][s][stream][r])
                                          for s in seeds], w)["sampling"]
                                  for r in range(reps)]))
        comp = {"n": len(seeds), "samples": first["samples"], "seed": seed,
                "sampling": sampling}
        total = len(first["problems"])
        allocs = allocations(CLAIM, comp, cost, total, LEVEL)
        out[stream] = {"replicates": reps, "sampling": sampling, "estimate": estimate,
                       "seed": seed, "sampling_share": sampling / (seed + sampling)
                       if seed + sampling > 0 else 0.0,
                       "effect": float(d.mean()), "per_seed": d.mean(axis=1).tolist(),
                       "allocations": allocs,
                       "mde": next(x["mde"] for x in allocs if x["current"]),
                       "best": min(allocs, key=lambda x: x["mde"])}
    out["crn_reduction"] = out["shared"]["sampling"] / out["per_problem"]["sampling"] \
        if out["per_problem"]["sampling"] > 0 else None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--arms", nargs=2, required=True)
    ap.add_argument("--metric", default="eval/accuracy_trained")
    ap.add_argument("--replicates", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root, out = Path(args.sweep), Path(args.out)
    data = collect(root)
    seeds = [s for s in data["experiment"].seeds
             if all(data["runs"][(arm, s)]["finished"] for arm in args.arms)]
    records, started = {}, time.perf_counter()
    for arm in args.arms:
        records[arm] = {}
        for seed in seeds:
            records[arm][seed] = evaluations(data["runs"][(arm, seed)]["dir"], args.replicates)
            print(f"{arm} seed {seed}: {time.perf_counter() - started:.0f} s", flush=True)
    config = data["runs"][(args.arms[0], seeds[0])]["config"]
    trained = (config.get("rollout") or {}).get("clusters")
    first = records[args.arms[0]][seeds[0]]["shared"][0]
    cost = costs([data["runs"][(arm, s)] for arm in args.arms for s in seeds],
                 first["samples"], len(first["problems"]))
    result = {"sweep": str(root), "arms": args.arms, "seeds": seeds, "metric": args.metric,
              "costs": cost, "seconds": time.perf_counter() - started,
              "streams": summary(records, seeds, args.arms, args.metric, trained, cost)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    compact = {arm: {str(s): {k: [r["correct"] for r in v] for k, v in per.items()}
                     for s, per in by_seed.items()} for arm, by_seed in records.items()}
    ids = {"problems": first["problems"], "tiers": first["tiers"], "samples": first["samples"]}
    out.with_name("records.json").write_text(json.dumps(ids | {"correct": compact}) + "\n")
    for stream in STREAMS:
        s = result["streams"][stream]
        print(f"{stream}: seed SD {100 * s['seed'] ** 0.5:.2f} pts, sampling SD "
              f"{100 * s['sampling'] ** 0.5:.2f} pts (record estimate "
              f"{100 * s['estimate'] ** 0.5:.2f}), sampling {100 * s['sampling_share']:.0f}% "
              f"of the variance; MDE at {len(seeds)} seeds {100 * s['mde']:.2f} pts; best "
              f"{s['best']['seeds']} seeds x {s['best']['samples']} samples x "
              f"{s['best']['problems']:g} problems: {100 * s['best']['mde']:.2f} pts")
    print(f"CRN: sampling variance / {result['streams']['crn_reduction']:.3g}")


if __name__ == "__main__":
    main()
