"""Score centering's top-k approximations against the exact version, and its cost.

On the testbed's warm start (`nano-chain-sum`) sampling in NVFP4 (W4A4, the fifth editions'
rollouts), the gradient of the centering term alone (A = 1 on every response token,
`lmpo.losses.centering`) with the sampler's top k (the paper's proportional tail, `topk`,
and the renormalised head, `topk_renorm`) is compared with the exact full-vocabulary one:
the relative distance ||g_k - g_full|| / ||g_full|| and the cosine, per k, beside the
head's mass Q_H. Also the update pass's time with and without the head (the gather and
the per-token sums), side by side on the same rows.

    python benchmarks/score_centering_bias.py [--prompts 16] [--group 4] [--ks 1 4 16 32]
"""

from __future__ import annotations

import argparse
import random
import time

import torch
from common import write_result

from lmpo.losses.centering import centering_gradient
from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.models.forward import behaviour_head, forward_logprobs
from lmpo.rollout import RolloutModel, sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", default="nano-chain-sum")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--ks", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    policy, tok = load_policy(resolve_policy(args.policy))
    encode = PromptEncoder(tok, "auto")
    problems = get_task("chain_sum").sample(args.prompts, random.Random(0))
    prompts = [encode(p.prompt) for p in problems for _ in range(args.group)]
    sampler = RolloutModel(policy, "fp4_e2m1")()
    r = sample(sampler, prompts, max_new_tokens=args.max_new_tokens, temperature=1.0,
               eos_token_id=stop_token_ids(policy, tok), pad_token_id=tok.pad_token_id,
               generator=torch.Generator().manual_seed(0))
    ids, mask = r.full_sequences()
    batch = (ids, mask, r.response_ids, r.response_mask)
    valid = r.response_mask.bool()
    exact = centering_gradient(policy, *batch, behaviour_head(sampler, ids, mask, r.response_ids),
                               "full")
    rows = []
    for k in args.ks:
        head = behaviour_head(sampler, ids, mask, r.response_ids, k=k)
        mass = float(head[1].exp().sum(-1)[valid].mean())
        for mode in ("topk", "topk_renorm"):
            g = centering_gradient(policy, *batch, head, mode)
            rows.append({"k": k, "mode": mode, "head_mass": mass,
                         "rel_distance": float((g - exact).norm() / exact.norm()),
                         "cosine": float(torch.nn.functional.cosine_similarity(g, exact, 0))})
            print(f"k {k:3d} {mode:12s} head mass {mass:.4f}  |g - g_full| / |g_full| "
                  f"{rows[-1]['rel_distance']:.4f}  cos {rows[-1]['cosine']:.4f}")
    top = behaviour_head(sampler, ids, mask, r.response_ids, k=max(args.ks))[0]

    def plain():
        forward_logprobs(policy, ids, mask, r.response_ids)[0].sum().backward()

    def with_head():
        logp, _, (p_logp, _) = forward_logprobs(policy, ids, mask, r.response_ids, head=top)
        (logp.sum() + p_logp.sum()).backward()

    cost = {"plain_s": timed(plain, args.repeats), "with_head_s": timed(with_head, args.repeats)}
    cost["ratio"] = cost["with_head_s"] / cost["plain_s"]
    print(f"forward + backward: {cost['plain_s']:.3f} s plain, {cost['with_head_s']:.3f} s with "
          f"the top-{max(args.ks)} head ({cost['ratio']:.2f}x)")
    write_result("score_centering_bias", {
        "policy": args.policy, "rollout": "fp4_e2m1", "prompts": args.prompts,
        "group": args.group, "tokens": int(valid.sum()), "vocab": policy.config.vocab_size,
        "rows": rows, "cost": cost}, threads=torch.get_num_threads())


if __name__ == "__main__":
    main()
