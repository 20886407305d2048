"""Which chain-sum tiers have all-fail groups at G = 8 from the start? The rule the EBPO
third edition trains by (written before this was run): train on every tier where at least
10% of G = 8 groups of the warm start (nano-chain-sum, temperature 1, 24 new tokens) fail
every sample. Measured on the pilot seed (100): 64 prompts per tier, 8 samples each, the
task's own checker; per tier the share of all-fail groups, of all-success groups and the
accuracy, with a 95% Wilson interval on the all-fail share.

    python experiments/ebpo_tiers.py --out experiments/results/ebpo_tiers.json
"""

from __future__ import annotations

import argparse
import json
import math
import random

import torch

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.rollout import sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy

RULE = 0.10  # the all-fail share at G = 8 that makes a tier "hard"


def wilson(k: int, n: int, z: float = 1.96) -> list[float]:
    p = k / n
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    return [max(0.0, mid - half), min(1.0, mid + half)]


def tier_groups(policy, tok, task, tier: str, prompts: int, group: int, seed: int) -> dict:
    problems = task.sample(prompts, random.Random(seed), cluster=tier)
    encode = PromptEncoder(tok, "auto")
    r = sample(policy, [encode(p.prompt) for p in problems for _ in range(group)],
               max_new_tokens=24, temperature=1.0, eos_token_id=stop_token_ids(policy, tok),
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed))
    texts = r.texts(tok)
    ok = [task.is_correct(problems[i // group], t) for i, t in enumerate(texts)]
    per_group = [sum(ok[g * group:(g + 1) * group]) for g in range(prompts)]
    fail = sum(1 for s in per_group if s == 0)
    return {"groups": prompts, "group_size": group, "all_fail": fail / prompts,
            "all_fail_ci95": wilson(fail, prompts),
            "all_success": sum(1 for s in per_group if s == group) / prompts,
            "accuracy": sum(ok) / len(ok), "hard": fail / prompts >= RULE}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="experiments/results/ebpo_tiers.json")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    policy, tok = load_policy(resolve_policy("nano-chain-sum"))
    policy.eval()
    task = get_task("chain_sum")
    tiers = {t: tier_groups(policy, tok, task, t, args.prompts, 8, args.seed)
             for t in task.clusters}
    for t, v in tiers.items():
        print(f"{t}: all-fail {v['all_fail']:.3f} {v['all_fail_ci95']}, all-success "
              f"{v['all_success']:.3f}, accuracy {v['accuracy']:.3f}"
              f"{'  <- hard' if v['hard'] else ''}")
    out = {"rule": f"train on every tier with all-fail share >= {RULE} at G = 8",
           "seed": args.seed, "policy": "nano-chain-sum", "tiers": tiers,
           "chosen": [t for t, v in tiers.items() if v["hard"]]}
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=2)
        fh.write("\n")
    print(f"chosen: {out['chosen']}; wrote {args.out}")


if __name__ == "__main__":
    main()
