"""lmpo train vs TRL's GRPOTrainer, side by side in one process (run in .venv-trl).

Same tiny policy and tokenizer, 16 prompts x G = 4, 32 new tokens, temperature
1, one optimiser step per rollout, the same loss (PPO-clip, eps 0.2, token-mean
= TRL's loss_type "dapo"), no KL, lr 5e-5, every chain-sum tier, the task's
checker as the reward (partial credit included, on both sides). The two run
alternately (TRL, lmpo, TRL, lmpo); a step's time is the wall time between
consecutive step ends (everything the trainer does per step),
median over the steps after the first three of each round. TRL runs with a
constant learning rate and no warm-up, like lmpo's run. Reward: mean training
reward of each round's last 5 steps, mean ± standard error over rounds.

    make test-trl   # builds .venv-trl
    .venv-trl/bin/python benchmarks/vs_trl.py [--steps 15] [--rounds 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import write_result

import lmpo.trainer.loop as loop
from lmpo.models import build_policy, build_tokenizer, load_policy, num_parameters, save_policy
from lmpo.tasks import get_task
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.config import load_config
from lmpo.trainer.train_config import TrainConfig
from lmpo.trainer.warmstart import resolve_policy

PROMPTS, G, NEW, LR = 16, 4, 32, 5e-5


def trl_round(policy_dir: Path, steps: int, out: Path, seed: int) -> tuple[list[float], float]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load_policy(policy_dir)
    task = get_task("chain_sum")
    problems = task.sample(PROMPTS * steps, random.Random(seed))
    by_prompt = {p.prompt: p for p in problems}
    data = Dataset.from_dict({"prompt": [p.prompt for p in problems]})

    def reward(prompts, completions, **kwargs):  # the task's own scorer, as lmpo train uses
        return [task.score(by_prompt[p], c) for p, c in zip(prompts, completions, strict=True)]

    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=PROMPTS * G,
                      num_generations=G, max_completion_length=NEW, temperature=1.0,
                      learning_rate=LR, beta=0.0, loss_type="dapo", epsilon=0.2,
                      max_steps=steps, logging_steps=1, report_to="none", save_strategy="no",
                      use_cpu=True, seed=seed, gradient_accumulation_steps=1,
                      lr_scheduler_type="constant", warmup_steps=0)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[Clock()])
    start = time.perf_counter()
    trainer.train()
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    times = [b - a for a, b in zip([start] + ends[:-1], ends, strict=True)]
    return times, statistics.mean(rewards[-5:])


def lmpo_round(policy_dir: Path, steps: int, out: Path, seed: int) -> tuple[list[float], float]:
    ends: list[float] = []
    real_append = loop.append_row

    def timed_append(path, row):
        real_append(path, row)
        ends.append(time.perf_counter())

    cfg = load_config(TrainConfig, "dapo", [
        f"policy={policy_dir}", f"steps={steps}", f"seed={seed}", f"optim.lr={LR}",
        f"rollout.batch_size={PROMPTS * G}", f"rollout.group_size={G}",
        f"rollout.max_new_tokens={NEW}", "rollout.dynamic_sampling=false",
        "loss.hparams={eps_low: 0.2, eps_high: 0.2}", "log.eval_every=100000",
        "log.checkpoint_every=100000", "log.eval_per_tier=1", "optim.warmup_steps=0",
        # one optimiser step per rollout over every tier, as TRL's run below
        "optim.minibatches=1", "rollout.clusters=null", "log.eval_temperature=0",
        "log.eval_samples=1"])
    loop.append_row = timed_append
    try:
        start = time.perf_counter()
        loop.train(cfg, out, progress=False)
    finally:
        loop.append_row = real_append
    rows = read_rows(out / "metrics.jsonl")
    times = [b - a for a, b in zip([start] + ends[:-1], ends, strict=True)]
    return times, statistics.mean(r["reward/mean"] for r in rows[-5:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--nano-rounds", type=int, default=8,
                    help="more rounds for the cheap model: its per-step reward is noisy")
    ap.add_argument("--sizes", nargs="+", default=["nano", "small"])
    args = ap.parse_args()
    torch.set_num_threads(2)
    tmp = Path(tempfile.mkdtemp())
    tok = build_tokenizer()
    rows = []
    for size in args.sizes:
        if size == "nano":
            policy_dir, weights = resolve_policy("nano-chain-sum"), "warm-started"
        else:
            policy_dir = save_policy(build_policy(size, tok), tok, tmp / f"{size}-init")
            weights = "random init"
        params = num_parameters(load_policy(policy_dir)[0])
        res = {"trl": ([], []), "lmpo": ([], [])}
        for r in range(args.nano_rounds if size == "nano" else args.rounds):
            for name, fn in (("trl", trl_round), ("lmpo", lmpo_round)):
                times, reward = fn(policy_dir, args.steps, tmp / f"{size}-{name}-{r}", seed=r)
                res[name][0].extend(times[3:])
                res[name][1].append(reward)
        med = {k: statistics.median(v[0]) for k, v in res.items()}
        rows.append({"size": size, "params": params, "weights": weights,
                     "rounds": len(res["trl"][1]),
                     "trl_s_per_step": med["trl"], "lmpo_s_per_step": med["lmpo"],
                     "speedup": med["trl"] / med["lmpo"],
                     **{f"{k}_reward_last5": statistics.mean(v[1]) for k, v in res.items()},
                     **{f"{k}_reward_last5_sem": statistics.stdev(v[1]) / len(v[1]) ** 0.5
                        if len(v[1]) > 1 else 0.0 for k, v in res.items()}})
        print(rows[-1], flush=True)
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"seconds per RL step, {PROMPTS} prompts x G={G}, {NEW} new tokens")
    for col in ("model", "weights", "TRL GRPOTrainer", "lmpo train", "speed-up",
                f"reward (last 5 of {args.steps}) TRL / lmpo"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['size']} ({r['params'] / 1e6:.2f}M)", r["weights"],
                      f"{r['trl_s_per_step']:.3f}", f"{r['lmpo_s_per_step']:.3f}",
                      f"{r['speedup']:.2f}x",
                      f"{r['trl_reward_last5']:.3f}±{r['trl_reward_last5_sem']:.3f} / "
                      f"{r['lmpo_reward_last5']:.3f}±{r['lmpo_reward_last5_sem']:.3f}")
    Console(width=150).print(table)
    import trl

    write_result("vs_trl", {"trl_version": trl.__version__, "rows": rows})


if __name__ == "__main__":
    main()
