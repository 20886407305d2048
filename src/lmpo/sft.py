"""Supervised warm start: teach a tiny policy the task's worked-solution format."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch

from lmpo.atomic import write_text
from lmpo.config import ConfigError, save_config
from lmpo.devices import check_device, resolve_device
from lmpo.evaluate import evaluate
from lmpo.models import build_policy, build_tokenizer, num_parameters, save_policy
from lmpo.models.forward import sft_loss
from lmpo.progress import LoopProgress
from lmpo.tasks import get_task
from lmpo.tasks.heldout import heldout_split, sample_excluding


@dataclass
class SFTConfig:
    preset_kind: ClassVar[str] = "sft"
    task: str = "chain_sum"
    """Built-in task name (see lmpo.tasks.TASKS)."""
    size: str = "nano"
    """Model size: nano (~0.5M), micro (~1.5M), small (~5M)."""
    steps: int = 800
    """Optimiser steps; each draws a fresh batch of problems."""
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 40
    """Linear warm-up, then cosine decay to 10% of lr."""
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    seed: int = 0
    eval_per_tier: int = 200
    """Held-out problems per tier for the final greedy evaluation."""
    max_new_tokens: int = 32
    threads: int = 2
    device: str = "auto"
    """auto (CUDA when present, else CPU) | cpu | cuda (lmpo.devices)."""
    out: str = "runs/sft/chain_sum_nano"
    """Output folder: a Hugging Face model folder plus eval.json and config.yaml."""

    def validate(self) -> None:
        for name in ("steps", "batch_size", "eval_per_tier", "max_new_tokens", "threads"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be > 0, got {self.lr}")
        check_device(self.device)


def lr_at(step: int, cfg: SFTConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


def sft_batch(task, tokenizer, problems):
    """Right-padded (input_ids, attention_mask, labels); loss only on completion tokens."""
    seqs, labels = [], []
    for p in problems:
        prompt = tokenizer.encode(p.prompt)
        target = tokenizer.encode(task.solution(p)) + [tokenizer.eos_token_id]
        seqs.append(prompt + target)
        labels.append([-100] * len(prompt) + target)
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
    lab = torch.full((len(seqs), width), -100)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, (s, lb) in enumerate(zip(seqs, labels, strict=True)):
        ids[i, :len(s)], lab[i, :len(s)], mask[i, :len(s)] = torch.tensor(s), torch.tensor(lb), 1
    return ids, mask, lab


def run_sft(cfg: SFTConfig, *, progress: bool = True) -> dict:
    """Train, evaluate, save. Returns {"loss_first", "loss_last", "eval", "seconds", ...}."""
    torch.set_num_threads(cfg.threads)
    task, tokenizer = get_task(cfg.task), build_tokenizer()
    heldout = heldout_split(task, cfg.eval_per_tier)
    exclude = heldout.prompts
    device = resolve_device(cfg.device)
    model = build_policy(cfg.size, tokenizer, seed=cfg.seed).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            betas=(0.9, 0.98))
    rng = random.Random(cfg.seed)
    losses, t0 = [], time.perf_counter()
    model.train()
    with LoopProgress(f"sft {cfg.task}", "loss {loss:.3f}", cfg.steps, enabled=progress,
                      loss=float("nan")) as bar:
        for step in range(cfg.steps):
            batch = sample_excluding(task, cfg.batch_size, rng, exclude)
            ids, mask, labels = sft_batch(task, tokenizer, batch)
            loss = sft_loss(model, ids.to(device), mask.to(device), labels.to(device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            for group in opt.param_groups:
                group["lr"] = lr_at(step, cfg)
            opt.step()
            losses.append(float(loss.detach()))
            bar.update(advance=1, loss=losses[-1])
    train_seconds = time.perf_counter() - t0
    result = evaluate(model, tokenizer, task, heldout.problems, max_new_tokens=cfg.max_new_tokens)
    out = save_policy(model.cpu(), tokenizer, cfg.out)
    save_config(cfg, out / "sft_config.yaml")
    summary = {
        "task": cfg.task, "size": cfg.size, "params": num_parameters(model),
        "loss_first": sum(losses[:10]) / min(10, len(losses)),
        "loss_last": sum(losses[-10:]) / min(10, len(losses)),
        "train_seconds": train_seconds, "seconds": time.perf_counter() - t0, "eval": result,
        "heldout": {k: vars(c) for k, c in heldout.counts.items()},
    }
    write_text(Path(out) / "eval.json", json.dumps(summary, indent=2) + "\n")
    return summary
