"""ESPO's ceiling on a steps-format task: the share of rollout tokens an oracle saves by
stopping each wrong response right after its first wrong step (lmpo.tasks.steps).

The policy (default: the long-reasoning warm start, `nano-chain-sum-long`) samples G
responses to training problems of each tier at temperature 1, as a rollout does; the
replay reports per tier and overall the sampled accuracy, the mean response length and
the share of tokens the oracle would not have generated.

    python benchmarks/oracle_savings.py [--policy nano-chain-sum-long] [--task chain_sum_long]
        [--tiers t8d1] [--prompts 64] [--group 4]
"""

from __future__ import annotations

import argparse
import random

import torch
from common import write_result

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.rollout import sample
from lmpo.tasks import get_task
from lmpo.tasks.steps import oracle_savings
from lmpo.warmstart import resolve_policy


def replay(policy, tok, task, problems, group, max_new, seed):
    encode = PromptEncoder(tok, "auto")
    reps = [p for p in problems for _ in range(group)]
    r = sample(policy, [encode(p.prompt) for p in reps], max_new_tokens=max_new,
               temperature=1.0, eos_token_id=stop_token_ids(policy, tok),
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed))
    lengths = r.lengths.tolist()
    responses = [ids[:n] for ids, n in zip(r.response_ids.tolist(), lengths, strict=True)]
    s = oracle_savings(task, tok, reps, responses)
    return {"accuracy": s.accuracy, "length_mean": sum(lengths) / len(lengths),
            "tokens": s.tokens, "saved": s.saved, "oracle_savings": s.share}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policy", default="nano-chain-sum-long")
    ap.add_argument("--task", default="chain_sum_long")
    ap.add_argument("--tiers", nargs="*", default=None, help="default: every tier")
    ap.add_argument("--prompts", type=int, default=64, help="per tier")
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=112)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    policy, tok = load_policy(resolve_policy(args.policy))
    policy.eval()
    task = get_task(args.task)
    tiers = args.tiers or task.clusters
    out, total = {}, {"tokens": 0, "saved": 0}
    for i, tier in enumerate(tiers):
        problems = task.sample(args.prompts, random.Random(i), cluster=tier)
        out[tier] = replay(policy, tok, task, problems, args.group, args.max_new_tokens, i)
        total["tokens"] += out[tier]["tokens"]
        total["saved"] += out[tier]["saved"]
        t = out[tier]
        print(f"{tier}: sampled accuracy {t['accuracy']:.1%}, mean length "
              f"{t['length_mean']:.1f} tokens, oracle savings {t['oracle_savings']:.1%}")
    share = total["saved"] / max(total["tokens"], 1)
    print(f"all tiers: oracle savings {share:.1%}")
    write_result(f"oracle_savings_{args.task}", {
        "policy": args.policy, "task": args.task, "tiers": tiers, "prompts": args.prompts,
        "group": args.group, "max_new_tokens": args.max_new_tokens, "per_tier": out,
        "oracle_savings": share}, threads=args.threads)


if __name__ == "__main__":
    main()
