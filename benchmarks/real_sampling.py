"""Sampling on a real pretrained chat model: lmpo.rollout.sample vs Hugging Face `generate`.

SmolLM2-135M-Instruct (`policy: smollm2-135m-instruct`, converted once into the user
cache), 8 chain-sum prompts x G = 8 in its chat format (~46 prompt tokens), 24 new
tokens, plain sampling at temperature 1, both sides stopping at <|im_end|>. Variants
alternate within each repeat in one process; median tokens/s (tokens up to and
including EOS). `generate` keeps every row until the longest ends; lmpo drops finished
rows and (by default) runs the prompt pass once per distinct prompt.

    python benchmarks/real_sampling.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time

import torch
from common import write_result

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.models.forward import forward_logprobs
from lmpo.rollout import sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy


def hf_generate(model, tok, prompts, max_new, seed, eos):
    torch.manual_seed(seed)
    batch = tok.pad({"input_ids": prompts}, return_tensors="pt", padding_side="left")
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new, eos_token_id=eos,
                             pad_token_id=tok.pad_token_id)
    gen = out[:, batch["input_ids"].shape[1]:]
    is_eos = torch.isin(gen, torch.tensor(eos))
    first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, gen.shape[1])
    return int(first.sum())


def lmpo_sample(model, tok, prompts, max_new, seed, eos, **kw):
    r = sample(model, prompts, max_new_tokens=max_new, eos_token_id=eos,
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed), **kw)
    return r.num_generated


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--policy", default="smollm2-135m-instruct",
                    help="a real model's name or a folder")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_policy(resolve_policy(args.policy))
    model.eval()
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    eos = stop_token_ids(model, tok)
    task = get_task("rg:chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                     "max_digits": 1})
    encode = PromptEncoder(tok, "auto")  # chat: SmolLM2 ships its template
    prompts = [encode(p.prompt) for p in task.sample(args.prompts, random.Random(0))
               for _ in range(args.group)]
    new = args.max_new_tokens
    variants = {
        "hf_generate_fp32": lambda s: hf_generate(model, tok, prompts, new, s, eos),
        "lmpo_fp32": lambda s: lmpo_sample(model, tok, prompts, new, s, eos),
        "lmpo_fp32_unshared": lambda s: lmpo_sample(model, tok, prompts, new, s, eos,
                                                    share_prompts=False),
        "hf_generate_bf16": lambda s: hf_generate(bf16, tok, prompts, new, s, eos),
        "lmpo_bf16": lambda s: lmpo_sample(bf16, tok, prompts, new, s, eos),
    }
    for fn in variants.values():
        fn(0)  # warm-up
    tps: dict[str, list[float]] = {k: [] for k in variants}
    secs: dict[str, list[float]] = {k: [] for k in variants}
    for rep in range(1, args.repeats + 1):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            n = fn(rep)
            dt = time.perf_counter() - t0
            tps[name].append(n / dt)
            secs[name].append(dt)
    med = {k: statistics.median(v) for k, v in tps.items()}
    # the training-inference mismatch of bf16 sampling: behaviour log-probs vs a float32
    # teacher-forced pass over the same tokens (what rollout/logp_mismatch logs)
    r = sample(bf16, prompts, max_new_tokens=new, eos_token_id=eos,
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(99))
    ids, mask = r.full_sequences()
    with torch.no_grad():
        fp32_logp, _ = forward_logprobs(model, ids, mask, r.response_ids, with_entropy=False)
    gap = (r.logp - fp32_logp).abs()[r.response_mask.bool()]
    row = {"model": "SmolLM2-135M-Instruct (float32 weights)", "rows": len(prompts),
           "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts), "max_new_tokens": new,
           **{f"{k}_tok_s": v for k, v in med.items()},
           **{f"{k}_s": statistics.median(v) for k, v in secs.items()},
           "lmpo_vs_generate_fp32": med["lmpo_fp32"] / med["hf_generate_fp32"],
           "lmpo_vs_generate_bf16": med["lmpo_bf16"] / med["hf_generate_bf16"],
           "lmpo_bf16_vs_generate_fp32": med["lmpo_bf16"] / med["hf_generate_fp32"],
           "shared_prompt_gain": med["lmpo_fp32"] / med["lmpo_fp32_unshared"],
           "bf16_logp_mismatch_mean": float(gap.mean()),
           "bf16_logp_mismatch_p99": float(gap.quantile(0.99)),
           "bf16_logp_mismatch_max": float(gap.max())}
    print(json.dumps(row, indent=1))
    write_result("real_sampling", {
        "note": "tokens counted up to and including EOS on both sides; median of the repeats, "
                "variants alternated in one process",
        "rows": [row]}, threads=args.threads)


if __name__ == "__main__":
    main()
