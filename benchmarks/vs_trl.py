"""lmpo train vs TRL's GRPOTrainer, side by side in one process (run in .venv-trl).

Same policy and tokenizer, temperature 1, one optimiser step per rollout, the same
loss (PPO-clip, eps 0.2, token-mean = TRL's loss_type "dapo"), no KL, and the same
reward function object on both sides: `lmpo.rewards.last_number` (1 when the last
number of the completion is the gold answer), passed to TRL as a reward function
and to lmpo as `reward.fn: benchmarks/bench_reward.py:reward`.
- tiny policies (nano warm-started, small random init): 16 prompts x G = 4, 32 new
  tokens, every chain-sum tier, lr 5e-5, raw prompts;
- `smollm2`: SmolLM2-135M-Instruct (the folder lmpo converts, `--smollm2-dir`), 8
  prompts x G = 8, 24 new tokens, 1-digit two-term chain sums in its chat format
  (TRL gets conversational prompts and applies the same template), lr 5e-6.
The two run
alternately (TRL, lmpo, TRL, lmpo); a step's time is the wall time between
consecutive step ends (everything the trainer does per step),
median over the steps after the first three of each round. TRL runs with a
constant learning rate and no warm-up, like lmpo's run. Reward: mean training
reward of each round's last 5 steps, mean ± standard error over rounds.

    make test-trl   # builds .venv-trl
    .venv/bin/lmpo eval --config real-demo --per-tier 1   # converts SmolLM2 once
    .venv-trl/bin/python benchmarks/vs_trl.py [--steps 15] [--rounds 2] \
        [--sizes nano small smollm2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from common import write_result

import lmpo.trainer.loop as loop
from lmpo.config import load_config
from lmpo.models import build_policy, build_tokenizer, load_policy, num_parameters, save_policy
from lmpo.models.convert import real_model
from lmpo.tasks import get_task
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.train_config import TrainConfig
from lmpo.warmstart import resolve_policy

BENCH_REWARD = Path(__file__).parent / "bench_reward.py"


@dataclass(frozen=True)
class Setting:
    prompts: int
    group: int
    new_tokens: int
    lr: float
    task: str
    task_params: dict = field(default_factory=dict)
    chat: bool = False


TINY = Setting(16, 4, 32, 5e-5, "chain_sum")
REAL = Setting(8, 8, 24, 5e-6, "rg:chain_sum", {"min_terms": 2, "max_terms": 2,
                                                "min_digits": 1, "max_digits": 1}, chat=True)


def trl_round(policy_dir: Path, steps: int, out: Path, seed: int, s: Setting, bf16: bool
              ) -> tuple[list[float], float]:
    from bench_reward import reward as shared_reward
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model, tok = load_policy(policy_dir)
    task = get_task(s.task, s.task_params or None)
    problems = task.sample(s.prompts * steps, random.Random(seed))
    prompts = [[{"role": "user", "content": p.prompt}] if s.chat else p.prompt for p in problems]
    data = Dataset.from_dict({"prompt": prompts, "answer": [p.answer for p in problems]})

    def reward(prompts, completions, answer, **kwargs):  # the very function lmpo calls
        if s.chat:
            completions = [c[-1]["content"] for c in completions]
        return shared_reward(prompts, completions, answer)

    ends: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            ends.append(time.perf_counter())

    args = GRPOConfig(output_dir=str(out), per_device_train_batch_size=s.prompts * s.group,
                      num_generations=s.group, max_completion_length=s.new_tokens,
                      temperature=1.0, learning_rate=s.lr, beta=0.0, loss_type="dapo", epsilon=0.2,
                      max_steps=steps, logging_steps=1, report_to="none", save_strategy="no",
                      use_cpu=True, seed=seed, gradient_accumulation_steps=1,
                      lr_scheduler_type="constant", warmup_steps=0, bf16=bf16)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[Clock()])
    start = time.perf_counter()
    trainer.train()
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    times = [b - a for a, b in zip([start] + ends[:-1], ends, strict=True)]
    return times, statistics.mean(rewards[-5:])


def lmpo_round(policy_dir: Path, steps: int, out: Path, seed: int, s: Setting, bf16: bool
               ) -> tuple[list[float], float]:
    ends: list[float] = []
    real_append = loop.append_row

    def timed_append(path, row):
        real_append(path, row)
        ends.append(time.perf_counter())

    task = [f"task={s.task}", *[f"task_params.{k}={v}" for k, v in s.task_params.items()],
            f"prompt_format={'chat' if s.chat else 'raw'}", f"reward.fn={BENCH_REWARD}:reward"]
    cfg = load_config(TrainConfig, "dapo", [
        f"policy={policy_dir}", f"steps={steps}", f"seed={seed}", f"optim.lr={s.lr}", *task,
        f"rollout.batch_size={s.prompts * s.group}", f"rollout.group_size={s.group}",
        f"rollout.max_new_tokens={s.new_tokens}", "rollout.dynamic_sampling=false",
        "rollout.max_gen_batches=1",  # the preset's refill needs dynamic sampling
        *(["optim.dtype=bfloat16", "rollout.dtype=bfloat16"] if bf16 else []),
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
    ap.add_argument("--sizes", nargs="+", default=["nano", "small", "smollm2"])
    ap.add_argument("--smollm2-dir", type=Path, default=None,
                    help="a converted SmolLM2 folder (default: the packaged model, "
                         "converted on first use)")
    ap.add_argument("--smollm2-rounds", type=int, default=1)
    ap.add_argument("--smollm2-steps", type=int, default=6)
    ap.add_argument("--nano-policy", default="nano-chain-sum", help="an SFT preset or a folder")
    ap.add_argument("--precision", choices=("float32", "bf16"), default="float32",
                    help="both sides: TRL's bf16=True (autocast), lmpo's bfloat16 updates "
                         "and rollouts")
    ap.add_argument("--out", default="vs_trl", help="results/<out>.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tmp = Path(tempfile.mkdtemp())
    tok = build_tokenizer()
    rows = []
    for size in args.sizes:
        setting, steps, rounds = TINY, args.steps, args.rounds
        if size == "nano":
            policy_dir, weights = resolve_policy(args.nano_policy), "warm-started"
            rounds = args.nano_rounds
        elif size == "smollm2":
            policy_dir = args.smollm2_dir or real_model("smollm2-135m-instruct")
            weights = "pretrained"
            setting, steps, rounds = REAL, args.smollm2_steps, args.smollm2_rounds
        else:
            policy_dir = save_policy(build_policy(size, tok), tok, tmp / f"{size}-init")
            weights = "random init"
        params = num_parameters(load_policy(policy_dir)[0])
        res = {"trl": ([], []), "lmpo": ([], [])}
        for r in range(rounds):
            for name, fn in (("trl", trl_round), ("lmpo", lmpo_round)):
                times, reward = fn(policy_dir, steps, tmp / f"{size}-{name}-{r}", seed=r,
                                   s=setting, bf16=args.precision == "bf16")
                res[name][0].extend(times[3:])
                res[name][1].append(reward)
        med = {k: statistics.median(v[0]) for k, v in res.items()}
        rows.append({"size": size, "params": params, "weights": weights,
                     "rounds": len(res["trl"][1]), "steps": steps,
                     "prompts_x_group": f"{setting.prompts}x{setting.group}",
                     "new_tokens": setting.new_tokens,
                     "trl_s_per_step": med["trl"], "lmpo_s_per_step": med["lmpo"],
                     "speedup": med["trl"] / med["lmpo"],
                     **{f"{k}_reward_last5": statistics.mean(v[1]) for k, v in res.items()},
                     **{f"{k}_reward_last5_sem": statistics.stdev(v[1]) / len(v[1]) ** 0.5
                        if len(v[1]) > 1 else 0.0 for k, v in res.items()}})
        print(rows[-1], flush=True)
    from rich.console import Console
    from rich.table import Table

    table = Table(title="seconds per RL step, same loss and reward function")
    for col in ("model", "weights", "prompts x G", "TRL GRPOTrainer", "lmpo train", "speed-up",
                "reward (last 5 steps) TRL / lmpo"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['size']} ({r['params'] / 1e6:.2f}M)", r["weights"],
                      r["prompts_x_group"], f"{r['trl_s_per_step']:.3f}",
                      f"{r['lmpo_s_per_step']:.3f}",
                      f"{r['speedup']:.2f}x",
                      f"{r['trl_reward_last5']:.3f}±{r['trl_reward_last5_sem']:.3f} / "
                      f"{r['lmpo_reward_last5']:.3f}±{r['lmpo_reward_last5_sem']:.3f}")
    Console(width=150).print(table)
    import trl

    write_result(args.out, {"trl_version": trl.__version__, "precision": args.precision,
                            "rows": rows})


if __name__ == "__main__":
    main()
