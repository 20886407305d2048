"""A whole `base_real` run, from the script's start to the run's end, phase by phase,
against its FLOP floor.

Runs `lmpo.trainer.loop.train` on the `base_real` preset (what `lmpo train --preset
base_real --out DIR` runs: 40 steps of SmolLM2-135M-Instruct, its evaluations before, at
step 20 and at step 40, its checkpoints) in this process, with `real_step.py`'s phase
timers on every step. The time counts everything a user waits for: Python's imports, the
policy's load, the first evaluation, the steps, the later evaluations, the checkpoints
and the final save. The starting policy's evaluation is read from the evaluation cache
where a run on this machine has sampled it before (`lmpo.eval_cache`: every run of an
experiment evaluates the same starting policy alike); `LMPO_EVAL_CACHE=off` times a
first run.

The floor of each step is `real_step.floors` at the lengths that step sampled; the floor
of each evaluation is its sampling's products (each distinct prompt once, then the rows
still decoding at each token step) in the evaluation's precision (float32: the trained
policy itself). What is not a matrix product (the sampler's draw, the optimiser, the
log-softmax over the 49k vocabulary, loading and saving) has no floor: it is what the
ratio shows. The row says what a run at its floor would take and which ratio a given
wall time (`--goal-min`, default 10) needs.

    python benchmarks/real_run.py [--set KEY=VALUE ...] [--repeats 5] [--goal-min 10]
"""

from __future__ import annotations

import time

STARTED = time.time()  # before the imports below: they are part of what a user waits for

import argparse  # noqa: E402
import collections  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from common import write_result  # noqa: E402
from real_step import (  # noqa: E402
    PHASES,
    Timers,
    floor_for,
    floor_of_what_ran,
    floors,
    instrument,
    lengths,
    sampling_floor,
)

import lmpo.evaluate as evaluate_mod  # noqa: E402
from lmpo.config import load_config  # noqa: E402
from lmpo.trainer import loop, setup  # noqa: E402
from lmpo.trainer.train_config import TrainConfig  # noqa: E402


class Recorder:
    """Each step's phase seconds and rollout, each evaluation's seconds and rollouts."""

    def __init__(self):
        self.timers = Timers()
        self.steps: list[dict] = []
        self.evaluations: list[dict] = []
        self.inside_eval = False
        self.opened_s = 0.0
        self.config: dict = {}

    def attach(self) -> None:
        t = self.timers
        open_run = setup.open_run

        def opened(*args, **kwargs):  # instrument the run as soon as it is open
            t0 = time.perf_counter()
            run = open_run(*args, **kwargs)
            self.opened_s = time.perf_counter() - t0 - sum(e["seconds"] for e in self.evaluations)
            instrument(run, t)
            self.config = run.state.policy.config.to_dict()
            return run

        loop.open_run = opened
        t.undo.append((loop, "open_run", open_run))
        step = loop.train_step

        def timed_step(i, run):
            t.s.clear()
            t.shapes.clear()
            t0 = time.perf_counter()
            row = step(i, run)
            self.steps.append({"seconds": time.perf_counter() - t0, "phases": dict(t.s),
                               "rollout": t.shapes["rollouts"][0],
                               "response_mean": row["response/length_mean"]})
            return row

        loop.train_step = timed_step
        t.undo.append((loop, "train_step", step))
        evaluate = setup.Run.evaluate

        def timed_eval(run, cache=False):
            self.inside_eval = True
            self.evaluations.append({"rollouts": []})
            t0 = time.perf_counter()
            try:
                return evaluate(run, cache=cache)
            finally:
                self.inside_eval = False
                self.evaluations[-1]["seconds"] = time.perf_counter() - t0

        setup.Run.evaluate = timed_eval
        t.undo.append((setup.Run, "evaluate", evaluate))
        sample = evaluate_mod.sample

        def eval_sample(*args, **kwargs):
            out = sample(*args, **kwargs)
            if self.inside_eval:
                self.evaluations[-1]["rollouts"].append(out)
            return out

        evaluate_mod.sample = eval_sample
        t.undo.append((evaluate_mod, "sample", sample))


def step_rows(rec: Recorder, c: dict, cfg, repeats: int) -> list[dict]:
    rows = []
    for s in rec.steps:
        prompts, resp = lengths(s["rollout"])
        floor = floors(c, cfg.optim.dtype, repeats, prompts, resp,
                       int(s["rollout"].prompt_mask.shape[1]), cfg.optim.minibatches)
        timed = {k: s["phases"].get(k, 0.0) for k in PHASES}
        timed["other"] = s["seconds"] - sum(timed.values())
        floor = floor_of_what_ran(floor, s["phases"])
        rows.append({"step_s": s["seconds"], "floor_s": sum(floor.values()),
                     "phases_s": timed, "floor_phases_s": floor,
                     "response_mean": s["response_mean"], "response_max": max(resp)})
    return rows


def eval_rows(rec: Recorder, c: dict, repeats: int) -> list[dict]:
    fl = floor_for(c, torch.float32, repeats)  # the trained policy samples in float32
    rows = []
    for e in rec.evaluations:
        floor, completions, tokens = 0.0, 0, 0
        for r in e["rollouts"]:
            prompts, resp = lengths(r)
            floor += sum(sampling_floor(fl, prompts, resp, int(r.prompt_mask.shape[1])))
            completions, tokens = completions + len(resp), tokens + sum(resp)
        # no sampling: the evaluation came from the cache (lmpo.eval_cache)
        rows.append({"seconds": e["seconds"], "floor_s": floor, "completions": completions,
                     "response_mean": tokens / max(1, completions),
                     "cached": not e["rollouts"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides of base_real (the smoke test: a tiny policy, short runs)")
    ap.add_argument("--repeats", type=int, default=5, help="timings per product shape")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--goal-min", type=float, default=10.0)
    ap.add_argument("--out", default="real_run")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    cfg = load_config(TrainConfig, "base_real", a.set)
    rec = Recorder()
    rec.attach()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        loop.train(cfg, Path(tmp) / "run", progress=False, verbose=False)
        train_s = time.perf_counter() - t0
        wall_s = time.time() - STARTED
    rec.timers.restore()
    c = rec.config
    steps, evals = step_rows(rec, c, cfg, a.repeats), eval_rows(rec, c, a.repeats)
    steps_s, steps_floor = sum(s["step_s"] for s in steps), sum(s["floor_s"] for s in steps)
    evals_s, evals_floor = sum(e["seconds"] for e in evals), sum(e["floor_s"] for e in evals)
    sampled = [e for e in evals if not e["cached"]]  # a cached one has no floor
    rest_s = wall_s - steps_s - evals_s
    floor_s = steps_floor + evals_floor
    phase_s = collections.Counter()
    phase_floor = collections.Counter()
    for s in steps:
        phase_s.update(s["phases_s"])
        phase_floor.update(s["floor_phases_s"])
    goal_s = 60 * a.goal_min
    result = {
        "steps": len(steps), "dtype": cfg.optim.dtype, "wall_s": wall_s, "train_s": train_s,
        "open_s": rec.opened_s, "steps_s": steps_s, "steps_floor_s": steps_floor,
        "steps_ratio": steps_s / steps_floor, "evaluations_s": evals_s,
        "evaluations_floor_s": evals_floor, "evaluations_cached": len(evals) - len(sampled),
        "evaluations_ratio": (sum(e["seconds"] for e in sampled) / evals_floor
                              if evals_floor else None),
        "rest_s": rest_s, "floor_s": floor_s, "ratio": wall_s / floor_s,
        "goal_s": goal_s, "goal_ratio_needed": (goal_s - rest_s) / floor_s,
        "phases_s": dict(phase_s), "floor_phases_s": dict(phase_floor),
        "evaluations": evals, "per_step": steps,
        "median_step_ratio": statistics.median(s["step_s"] / s["floor_s"] for s in steps)}
    print(f"base_real run of {len(steps)} steps ({cfg.optim.dtype}): {wall_s / 60:.1f} min from "
          f"start to exit; steps {steps_s:.0f} s ({result['steps_ratio']:.2f}x their floor "
          f"{steps_floor:.0f} s), evaluations {evals_s:.0f} s ({len(sampled)} sampled, floor "
          f"{evals_floor:.0f} s), the rest {rest_s:.0f} s; {a.goal_min:g} min needs "
          f"{result['goal_ratio_needed']:.2f}x the floor over steps and evaluations", flush=True)
    print("   ", " ".join(f"{k} {v:.0f}/{phase_floor.get(k, 0):.0f}" for k, v in phase_s.items()
                          if v > 0.5))
    write_result(a.out, {"preset": "base_real", "overrides": a.set} | result, threads=a.threads)


if __name__ == "__main__":
    main()
