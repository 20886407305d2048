"""Greedy per-tier accuracy on a fixed held-out problem set."""

from __future__ import annotations

import random

import torch

from lmpo.rollout import sample
from lmpo.tasks.base import Problem
from lmpo.trainer.batch import sampling_mode, score_checked

EVAL_SEED_OFFSET = 1_000_003  # held-out problems never share the training stream's seed


def heldout_problems(task, per_tier: int, seed: int) -> list[Problem]:
    rng = random.Random(EVAL_SEED_OFFSET + seed)
    return [p for tier in task.clusters for p in task.sample(per_tier, rng, cluster=tier)]


def complete(model, tokenizer, problems: list[Problem], *, max_new_tokens: int,
             batch_size: int = 256, temperature: float = 0.0, generator=None) -> list[str]:
    """Completion texts (EOS stripped) for `problems`, in order."""
    texts = []
    with sampling_mode(model):
        for start in range(0, len(problems), batch_size):
            chunk = problems[start:start + batch_size]
            texts += sample(model, [tokenizer.encode(p.prompt) for p in chunk],
                            max_new_tokens=max_new_tokens, temperature=temperature,
                            eos_token_id=tokenizer.eos_token_id,
                            pad_token_id=tokenizer.pad_token_id,
                            generator=generator).texts(tokenizer)
    return texts


@torch.no_grad()
def evaluate(model, tokenizer, task, problems: list[Problem], *, max_new_tokens: int,
             batch_size: int = 256) -> dict:
    """{"per_tier": {tier: accuracy}, "mean": accuracy over all problems, "n": count}."""
    texts = complete(model, tokenizer, problems, max_new_tokens=max_new_tokens,
                     batch_size=batch_size)
    hits: dict[str, list[float]] = {}
    for i, (p, text) in enumerate(zip(problems, texts, strict=True)):
        hits.setdefault(p.cluster, []).append(
            score_checked(task, p, text, f"held-out problem {i}"))
    per_tier = {tier: sum(v) / len(v) for tier, v in hits.items()}
    total = [x for v in hits.values() for x in v]
    return {"per_tier": per_tier, "mean": sum(total) / len(total), "n": len(total)}


def accuracy_table(results: dict[str, dict], title: str = "greedy accuracy per tier"):
    """A rich Table with one column per named result (e.g. before / after)."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("tier")
    for name in results:
        table.add_column(name, justify="right")
    tiers = list(next(iter(results.values()))["per_tier"])
    for tier in tiers + ["mean"]:
        cells = [f"{(r['per_tier'][tier] if tier != 'mean' else r['mean']) * 100:.1f}%"
                 for r in results.values()]
        table.add_row(tier, *cells)
    return table
