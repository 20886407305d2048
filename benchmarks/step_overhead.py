"""A full lmpo training step vs the sum of its bare parts, in one process.

Full step: `lmpo train` with the default group preset (`grpo`, the testbed) on the
warm-started nano policy (`time/step` from metrics.jsonl: rollout, scoring,
advantages, update, diagnostics; evaluation and checkpoints are off). Bare
parts: the rollout engine alone sampling a batch of the same size, settings and
tiers,
plus the preset's epochs x minibatches forward+backward passes of the policy
over those same tokens, each followed by an AdamW step. Both are
normalised per generated token (batches differ in length), medians over steps.

    python benchmarks/step_overhead.py [--policy nano-chain-sum] [--steps 40]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import write_result

from lmpo.config import load_config
from lmpo.models import load_policy
from lmpo.models.forward import forward_logprobs
from lmpo.rollout import sample
from lmpo.tasks import get_task
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig
from lmpo.warmstart import resolve_policy


def bare_parts(policy_dir, cfg: TrainConfig, repeats: int, seed: int = 0) -> list[float]:
    """Seconds per generated token of sample() + the preset's forward/backward passes and
    optimiser steps."""
    policy, tok = load_policy(policy_dir)
    task = get_task(cfg.task)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-12)  # the update's arithmetic only
    per_token = []
    for _ in range(repeats):
        n = cfg.rollout.batch_size // cfg.rollout.group_size
        tiers = cfg.rollout.clusters or [None]  # the tiers the run trains on: the same work
        drawn = [task.sample(1, rng, cluster=tiers[i % len(tiers)])[0] for i in range(n)]
        problems = [p for p in drawn for _ in range(cfg.rollout.group_size)]
        t0 = time.perf_counter()
        policy.eval()
        r = sample(policy, [tok.encode(p.prompt) for p in problems],
                   max_new_tokens=cfg.rollout.max_new_tokens, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, generator=gen)
        policy.train()
        ids, mask = r.full_sequences()
        for _ in range(cfg.optim.epochs):  # shuffled minibatches, as the trainer's
            for mb in torch.randperm(len(ids), generator=gen).chunk(cfg.optim.minibatches):
                logp, _ = forward_logprobs(policy, ids[mb], mask[mb], r.response_ids[mb])
                (logp * r.response_mask[mb]).sum().backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
        per_token.append((time.perf_counter() - t0) / r.num_generated)
    return per_token


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="nano-chain-sum",
                    help="a model folder or a warm-start preset (built on first use)")
    ap.add_argument("--preset", default="grpo")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(2)
    policy_dir = resolve_policy(args.policy)
    tmp = Path(tempfile.mkdtemp())
    cfg = load_config(TrainConfig, args.preset, [
        f"policy={policy_dir}", f"steps={args.steps}", "log.eval_every=100000",
        "log.checkpoint_every=100000", "log.eval_per_tier=1", "log.tensorboard=true"])
    train(cfg, tmp / "run", progress=False)
    rows = read_rows(tmp / "run" / "metrics.jsonl")[args.warmup:]
    full = [r["time/step"] / r["tokens/generated"] for r in rows]
    parts = {k: statistics.median(r[f"time/{k}"] / r["tokens/generated"] for r in rows)
             for k in ("rollout", "scoring", "update")}
    bare = bare_parts(policy_dir, cfg, len(rows))
    result = {
        "preset": args.preset, "batch": cfg.rollout.batch_size,
        "minibatches": cfg.optim.minibatches, "epochs": cfg.optim.epochs,
        "max_new_tokens": cfg.rollout.max_new_tokens, "measured_steps": len(rows),
        "full_step_us_per_token": 1e6 * statistics.median(full),
        "bare_parts_us_per_token": 1e6 * statistics.median(bare),
        "full_parts_us_per_token": {k: 1e6 * v for k, v in parts.items()},
        "ratio": statistics.median(full) / statistics.median(bare),
        "ratio_of_means": statistics.mean(full) / statistics.mean(bare),
        "note": "KL diagnostics (one extra forward each) run every log.policy_kl_every=5 "
                "steps: the median is a step without them, the ratio of means includes them",
    }
    print(json.dumps(result, indent=2))
    write_result("step_overhead", result)
    print(f"full step / bare parts = {result['ratio']:.2f}x (median), "
          f"{result['ratio_of_means']:.2f}x (means)")


if __name__ == "__main__":
    main()
