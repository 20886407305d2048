"""The real testbed's step (`base_real`), phase by phase, against its FLOP floor.

Opens a `base_real` run (SmolLM2-135M-Instruct, 4 prompts x G = 8, up to 128 new tokens,
2 minibatches, its evaluation and diagnostics cadence) and runs lmpo's own training step
(`lmpo.trainer.loop.train_step`) on it, timing each phase as it happens:

- `sampling_prompt`, `sampling_decode`: the rollout copy's prompt pass and token steps;
- `recompute`: the no-grad pass of the trained policy over the batch (log-probs and the
  entropy over the 49k vocabulary) that a low-precision rollout runs for its mismatch;
- `reference`: the reference's pass on diagnostic steps (log.policy_kl_every);
- `update_forward`, `update_backward`, `optimizer`, `grad_clip`: the minibatch updates;
- `logprob_entropy`: the log-softmax reduction over the vocabulary, inside the passes above
  (reported, not added: it is part of each pass's time);
- `diagnostics`: the float32 pass after the update on diagnostic steps;
- `evaluation`: the held-out evaluation (before training, and every log.eval_every);
- `other`: the rest of the step (scoring, advantages, bookkeeping).

The floor of each phase is its matrix products counted from the shapes the step actually
ran (each distinct prompt's length, every response's sampled length: padding is work the
floor does not count), each timed at this process's own throughput for that shape and
dtype (`common.Floor`). The distinct prompts count once per pass, though each of the
update's minibatches runs the prompts it holds: with base_real's 2 minibatches that leaves
the update's floor ~10% low, so its ratio reads high, not low. The row's `ratio` is the
step (evaluation excluded: it runs 3 times in 40 steps) over its floor;
`run_40_estimate_s` adds the evaluations a 40-step run makes. `flop_floor.py --sizes
base_real` writes these rows with the others.

    python benchmarks/real_step.py [--dtypes bfloat16,float32] [--steps 3] [--out real_step]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import DTYPES, Floor, write_result

from lmpo.config import load_config
from lmpo.models import forward as prefix_mod
from lmpo.rollout import fast_llama
from lmpo.trainer import loop, setup, stages
from lmpo.trainer import update as update_mod
from lmpo.trainer.train_config import TrainConfig
from lmpo.warmstart import resolve_policy

OVERHEAD = prefix_mod.BUCKET_OVERHEAD


class Timers:
    """Seconds per phase, recorded by wrapping the functions each phase calls."""

    def __init__(self):
        self.s = collections.defaultdict(float)
        self.shapes = collections.defaultdict(list)
        self.undo = []
        self.inside = None  # the label of the wrapped call now running, if it marks itself

    def wrap(self, owner, name, label, classify=None, mark=False):
        """Time `owner.name` under `label` (or `classify(args, kwargs, out)`); with `mark`,
        `self.inside` is the label while it runs (the calls inside it can tell)."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            if mark:
                self.inside = label
            try:
                out = original(*args, **kwargs)
            finally:
                if mark:
                    self.inside = None
            key = classify(args, kwargs, out) if classify else label
            self.s[key] += time.perf_counter() - t0
            return out

        setattr(owner, name, timed)
        self.undo.append((owner, name, original))

    def restore(self):
        for owner, name, original in reversed(self.undo):
            setattr(owner, name, original)


def instrument(run, timers: Timers) -> None:
    state = run.state
    w = timers.wrap
    w(fast_llama.FastLlamaDecoder, "prefill", "sampling_prompt")
    w(fast_llama.FastLlamaDecoder, "step", "sampling_decode")

    def which(args, kwargs, out):  # the recompute, the reference's pass, or the float32
        if timers.inside == "diagnostics":  # pass after the update (in `diagnostics`)
            return "diagnostics_pass"
        return "reference" if args[0] is state.reference else "recompute"

    w(stages, "forward_logprobs", None, which)
    w(update_mod, "forward_logprobs", "update_forward")
    w(prefix_mod, "logprobs_and_entropy", "logprob_entropy")
    w(loop, "after_update", "diagnostics", mark=True)
    w(torch.Tensor, "backward", "update_backward")
    w(torch.nn.utils, "clip_grad_norm_", "grad_clip")
    w(state.opt, "step", "optimizer")

    def sampled(args, kwargs, out):  # the rollout's shapes, for the floor
        timers.shapes["rollouts"].append(out)
        return "sampling"

    w(stages, "sample", None, sampled)


def lengths(rollout) -> tuple[list[int], list[int]]:
    """(each distinct prompt's length, every response's length)."""
    p = rollout.prompt_mask.sum(1)
    distinct = {tuple(ids[-int(n):].tolist()): int(n)
                for ids, n in zip(rollout.prompt_ids, p, strict=True)}
    return list(distinct.values()), [int(x) for x in rollout.lengths]


_FLOORS: dict = {}


def floor_for(c: dict, dtype, repeats: int) -> Floor:
    """One `Floor` per (model, dtype, repeats) in this process, so a shape is timed once."""
    key = (json.dumps(c, sort_keys=True, default=str), str(dtype), repeats)
    if key not in _FLOORS:
        _FLOORS[key] = Floor(c, dtype, repeats)
    return _FLOORS[key]


def sampling_floor(fl: Floor, prompts: list[int], resp: list[int], prompt_rows: int):
    """(prompt pass, decode) floor seconds of one sampling call: each distinct prompt once,
    then at each token step the rows still decoding, over the growing context."""
    p = statistics.mean(prompts)
    prompt = fl.layers(sum(prompts), (p + 1) / 2, len(prompts))
    decode = 0.0
    for t in range(1, max(resp)):  # rows still decoding at each token step
        rows = sum(n > t for n in resp)
        decode += fl.layers(rows, prompt_rows + t, rows)
    return prompt, decode


def floors(c: dict, dtype, repeats: int, prompts: list[int], resp: list[int], prompt_rows,
           minibatches: int) -> dict[str, float]:
    """Floor seconds per phase of one step (float32 for the post-update diagnostics)."""
    fl, f32 = floor_for(c, DTYPES[dtype], repeats), floor_for(c, torch.float32, repeats)
    p = statistics.mean(prompts)
    prompt, decode = sampling_floor(fl, prompts, resp, prompt_rows)

    def pass_over(f, parts):  # the teacher-forced pass: each distinct prompt once, then
        rows = max(1, sum(resp) // parts)  # the responses, in `parts` equal pieces
        return (parts * f.layers(rows, p + statistics.mean(resp) / 2, rows)
                + f.layers(sum(prompts), (p + 1) / 2, 0))

    forward = pass_over(fl, minibatches)
    return {"sampling_prompt": prompt, "sampling_decode": decode, "recompute": pass_over(fl, 1),
            "reference": pass_over(fl, 1), "update_forward": forward,
            "update_backward": 2 * forward, "diagnostics": pass_over(f32, 1)}


def floor_of_what_ran(floor: dict[str, float], secs: dict[str, float]) -> dict[str, float]:
    """The phases' floors, 0 for a phase that did not run this step. The diagnostics'
    float32 pass runs on diagnostic steps only (log.policy_kl_every), while `after_update`
    (the `diagnostics` phase) runs on every step: its floor counts where the pass ran."""
    def ran(k):
        return secs.get("diagnostics_pass" if k == "diagnostics" else k, 0.0) > 0
    return {k: (v if ran(k) else 0.0) for k, v in floor.items()}


VARIANTS = ("before", "lmpo")
"""`before`: the step as it was before length buckets and fused AdamW (one padded pass,
torch's multi-tensor AdamW); `lmpo`: as it is."""


def measure(dtype: str, steps: int, repeats: int, variant: str, evaluated: dict,
            overrides=()) -> dict:
    """One variant's steps; the held-out evaluation (the same float32 sampling in every
    variant) is timed once and reused from `evaluated` after that."""
    cfg = load_config(TrainConfig, "base_real", [
        f"optim.dtype={dtype}", f"rollout.dtype={dtype}", "log.checkpoint_every=1000",
        "log.eval_every=1000", *overrides])
    timers = Timers()
    prefix_mod.BUCKET_OVERHEAD = float("inf") if variant == "before" else OVERHEAD
    with tempfile.TemporaryDirectory() as tmp, _restore_overhead():
        if evaluated:  # opening evaluates the starting policy
            timers.undo.append((setup.Run, "evaluate", setup.Run.evaluate))
            setup.Run.evaluate = lambda run, cache=False: evaluated["result"]
        else:
            timers.wrap(setup.Run, "evaluate", "evaluation", lambda a, k, out: (
                evaluated.update(result=out) or "evaluation"))
        run = setup.open_run(cfg, Path(tmp) / "run", resolve_policy(cfg.policy),
                             resume=False, progress=False, verbose=False)
        timers.restore()
        evaluated.setdefault("seconds", timers.s["evaluation"])
        evaluation = evaluated["seconds"]
        if variant == "before":
            run.state.opt = torch.optim.AdamW(run.state.opt.param_groups[0]["params"],
                                              lr=cfg.optim.lr, foreach=True)
        instrument(run, timers)
        per_step = []
        try:
            for step in range(1, steps + 1):
                timers.s.clear()
                timers.shapes.clear()
                t0 = time.perf_counter()
                row = loop.train_step(step, run)
                total = time.perf_counter() - t0
                per_step.append((total, dict(timers.s), timers.shapes["rollouts"][0],
                                 row["response/length_mean"]))
        finally:
            timers.restore()
            policy_config = run.state.policy.config.to_dict()
            run.close()
    return summarise(dtype, variant, cfg, per_step, evaluation, policy_config, repeats)


@contextlib.contextmanager
def _restore_overhead():
    try:
        yield
    finally:
        prefix_mod.BUCKET_OVERHEAD = OVERHEAD


PHASES = ("sampling_prompt", "sampling_decode", "recompute", "reference", "update_forward",
          "update_backward", "optimizer", "grad_clip", "diagnostics")


def summarise(dtype, label, cfg, per_step, evaluation, c, repeats) -> dict:
    steps = []
    for total, secs, rollout, length in per_step:
        prompts, resp = lengths(rollout)
        prompt_rows = int(rollout.prompt_mask.shape[1])
        floor = floors(c, dtype, repeats, prompts, resp, prompt_rows, cfg.optim.minibatches)
        timed = {k: secs.get(k, 0.0) for k in PHASES}
        # the sampler's own work besides the model (drawing, recording, bookkeeping)
        timed["sampling_other"] = secs.get("sampling", 0.0) - timed["sampling_prompt"] \
            - timed["sampling_decode"]
        timed["other"] = total - sum(timed.values())
        floor = floor_of_what_ran(floor, secs)
        steps.append({"step_s": total, "floor_s": sum(floor.values()),
                      "ratio": total / sum(floor.values()), "phases_s": timed,
                      "floor_phases_s": floor,
                      "logprob_entropy_s": secs.get("logprob_entropy", 0.0),
                      "response_mean": length, "response_max": max(resp),
                      "prompt_tokens": statistics.mean(prompts)})
    step = statistics.median(s["step_s"] for s in steps)
    floor = statistics.median(s["floor_s"] for s in steps)
    evals = 1 + cfg.steps // cfg.log.eval_every  # before, and every eval_every
    row = {"size": "base_real", "dtype": dtype, "variant": label, "steps": steps,
           "step_s": step, "floor_s": floor, "ratio": step / floor,
           "evaluation_s": evaluation,
           "run_40_estimate_s": step * cfg.steps + evals * evaluation}
    print(f"base_real {dtype:9s} {label:10s} step {step:6.1f} s  floor {floor:5.1f} s  "
          f"ratio {row['ratio']:.2f}x  evaluation {evaluation:5.1f} s  "
          f"40-step run ~{row['run_40_estimate_s'] / 60:.1f} min", flush=True)
    for s in steps:
        print("   ", " ".join(f"{k} {v:.2f}/{s['floor_phases_s'].get(k, 0):.2f}"
                              for k, v in s["phases_s"].items() if v > 0.005),
              f"| lengths mean {s['response_mean']:.0f} max {s['response_max']}", flush=True)
    return row


def base_real_rows(dtypes, steps: int, repeats: int, variants=VARIANTS,
                   overrides=()) -> list[dict]:
    """Every (dtype, variant) row, the variants of a dtype one after the other;
    `overrides` (key=value) change base_real (the smoke test's tiny policy and sizes)."""
    evaluated: dict = {}
    return [measure(d, steps, repeats, v, evaluated, overrides) for d in dtypes
            for v in variants]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", default="real_step")
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="overrides of base_real (the smoke test: a tiny policy, short runs)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    rows = base_real_rows(a.dtypes.split(","), a.steps, a.repeats, a.variants.split(","),
                          a.set)
    write_result(a.out, {"steps": a.steps, "rows": rows}, threads=a.threads)


if __name__ == "__main__":
    main()
