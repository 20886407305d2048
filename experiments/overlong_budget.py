"""Where responses truncate: the share of the warm policies' responses (each testbed
preset's own task, prompt format, rollout precision and temperature) that reach its
documented budget without ending, per tier, with a 95% Wilson interval. The overlong
options (`reward.overlong`, `loss.mask_truncated`) act only where this share is material;
the rule for using a setting to test them is >= 10% at the testbed's own budget (not a
budget lowered to force truncation).

    python experiments/overlong_budget.py --out experiments/results/overlong_budget.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

from lmpo.config import load_config
from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.rollout import sample
from lmpo.rollout.precision import RolloutModel
from lmpo.tasks import get_task
from lmpo.trainer.train_config import TrainConfig
from lmpo.warmstart import resolve_policy

sys.path.insert(0, str(Path(__file__).parent))
from ebpo_tiers import wilson  # noqa: E402

# each testbed preset as it is configured: task (and parameters), warm start, prompt
# format, documented budget (rollout.max_new_tokens), rollout precision and temperature
TESTBEDS = ("base", "base_long", "base_real")
SEED, PROMPTS = 300, 256


def shares(testbed: str) -> dict:
    cfg = load_config(TrainConfig, testbed)
    policy, tok = load_policy(resolve_policy(cfg.policy))
    model = RolloutModel(policy.eval(), cfg.rollout.dtype)()  # the trainer's sampler copy
    task = get_task(cfg.task, cfg.task_params or None)
    encode = PromptEncoder(tok, cfg.prompt_format, cfg.system_prompt)
    out = {"task": cfg.task, "policy": cfg.policy, "tokens": cfg.rollout.max_new_tokens,
           "rollout_dtype": cfg.rollout.dtype, "tiers": {}}
    for i, tier in enumerate(task.clusters):
        problems = task.sample(PROMPTS, random.Random(SEED + i), cluster=tier)
        r = sample(model, [encode(p.prompt) for p in problems],
                   max_new_tokens=cfg.rollout.max_new_tokens,
                   temperature=cfg.rollout.temperature, eos_token_id=stop_token_ids(policy, tok),
                   pad_token_id=tok.pad_token_id,
                   generator=torch.Generator().manual_seed(SEED + i))
        cut = sum(reason == "length" for reason in r.stop_reason)
        out["tiers"][tier] = {"truncated": cut / PROMPTS, "ci95": wilson(cut, PROMPTS),
                              "length_mean": float(r.lengths.float().mean()),
                              "trained": tier in (cfg.rollout.clusters or task.clusters)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="experiments/results/overlong_budget.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    record = {"seed": SEED, "prompts_per_tier": PROMPTS, "rule": ">= 10% at the budget",
              "settings": {}}
    for testbed in TESTBEDS:
        record["settings"][testbed] = shares(testbed)
        print(testbed, json.dumps(record["settings"][testbed]["tiers"]), flush=True)
    Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
