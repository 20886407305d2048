"""Where responses truncate: the share of the warm policies' responses (temperature 1)
that reach each testbed's documented budget without ending, per tier, with a 95% Wilson
interval. The overlong options (`reward.overlong`, `loss.mask_truncated`) act only where
this share is material; the rule for using a setting to test them is >= 10% at the
testbed's own budget (not a budget lowered to force truncation).

    python experiments/overlong_budget.py --out experiments/results/overlong_budget.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.rollout import sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy

sys.path.insert(0, str(Path(__file__).parent))
from ebpo_tiers import wilson  # noqa: E402

SETTINGS = [  # testbed preset: task, warm start, its documented budget (rollout.max_new_tokens)
    {"testbed": "base", "task": "chain_sum", "policy": "nano-chain-sum", "tokens": 24},
    {"testbed": "base_long", "task": "chain_sum_long", "policy": "nano-chain-sum-long",
     "tokens": 112},
]
SEED, PROMPTS = 300, 256


def shares(s: dict) -> dict:
    policy, tok = load_policy(resolve_policy(s["policy"]))
    policy.eval()
    task, encode = get_task(s["task"]), PromptEncoder(tok, "auto")
    out = {}
    for i, tier in enumerate(task.clusters):
        problems = task.sample(PROMPTS, random.Random(SEED + i), cluster=tier)
        r = sample(policy, [encode(p.prompt) for p in problems], max_new_tokens=s["tokens"],
                   temperature=1.0, eos_token_id=stop_token_ids(policy, tok),
                   pad_token_id=tok.pad_token_id,
                   generator=torch.Generator().manual_seed(SEED + i))
        cut = sum(reason == "length" for reason in r.stop_reason)
        out[tier] = {"truncated": cut / PROMPTS, "ci95": wilson(cut, PROMPTS),
                     "length_mean": float(r.lengths.float().mean())}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="experiments/results/overlong_budget.json")
    args = ap.parse_args()
    torch.set_num_threads(1)
    record = {"seed": SEED, "prompts_per_tier": PROMPTS, "rule": ">= 10% at the budget",
              "settings": {}}
    for s in SETTINGS:
        record["settings"][s["testbed"]] = s | {"tiers": shares(s)}
        print(s["testbed"], json.dumps(record["settings"][s["testbed"]]["tiers"]), flush=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
