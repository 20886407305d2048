"""Tokens/s of lmpo.rollout.sample vs Hugging Face `generate`, same model and settings.

Same tiny Llama, prompts (chain-sum problems, mixed lengths), batch,
max_new_tokens and plain sampling (temperature 1, no top-k/top-p), the two
alternated in one process; median of the repeats. Tokens counted are the tokens
each method actually returns up to and including EOS. Also: the cost of
recording regret and of per-step critic values, as ratios to bare sampling.

    python benchmarks/rollout_speed.py [--repeats 5] [--max-new-tokens 32]
    python benchmarks/rollout_speed.py --fixed-length --sizes nano --nano-policy none \
        --batches 256 --max-new-tokens 48      # every row runs to the limit on both sides

`--fixed-length` ignores EOS on both sides (lmpo: no EOS id; `generate`:
min_new_tokens = max_new_tokens), so both generate exactly batch x max_new_tokens
tokens: the per-token cost, without lmpo's dropping of finished rows.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch
from common import write_result

from lmpo.models import ValueModel, build_policy, build_tokenizer, load_policy, num_parameters
from lmpo.rollout import IncrementalValues, sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy


def hf_generate(model, tok, prompts, max_new, seed, fixed=False):
    torch.manual_seed(seed)
    batch = tok.pad({"input_ids": prompts}, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**batch, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                             max_new_tokens=max_new, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id,
                             min_new_tokens=max_new if fixed else None)
    gen = out[:, batch["input_ids"].shape[1]:]
    if fixed:
        return gen.numel()
    is_eos = gen == tok.eos_token_id
    first = torch.where(is_eos.any(1), is_eos.float().argmax(1) + 1, gen.shape[1])
    return int(first.sum())


def lmpo_sample(model, tok, prompts, max_new, seed, fixed=False, **kw):
    r = sample(model, prompts, max_new_tokens=max_new,
               eos_token_id=-1 if fixed else tok.eos_token_id,
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed), **kw)
    return r.num_generated


def measure(model, critic, tok, prompts, args) -> dict[str, float]:
    """Median tokens/s of each variant, the variants alternated within each repeat."""
    new, fx = args.max_new_tokens, args.fixed_length
    variants = {
        "hf_generate": lambda s: hf_generate(model, tok, prompts, new, s, fx),
        "lmpo": lambda s: lmpo_sample(model, tok, prompts, new, s, fx),
        "lmpo_hf_forward": lambda s: lmpo_sample(model, tok, prompts, new, s, fx, fast=False),
        "lmpo_no_regret": lambda s: lmpo_sample(model, tok, prompts, new, s, fx,
                                                record_regret=False),
        "lmpo_values": lambda s: lmpo_sample(model, tok, prompts, new, s, fx, value_fn=critic),
    }
    for fn in variants.values():
        fn(0)  # warm-up
    tps: dict[str, list[float]] = {k: [] for k in variants}
    for rep in range(1, args.repeats + 1):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            n = fn(rep)
            tps[name].append(n / (time.perf_counter() - t0))
    return {k: statistics.median(v) for k, v in tps.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["nano", "small"])
    ap.add_argument("--nano-policy", default="nano-chain-sum",
                    help="warm-started nano policy (its responses end at EOS like in RL): a "
                         "folder or a warm-start preset (built on first use); 'none' = random "
                         "initialisation")
    ap.add_argument("--batches", nargs="+", type=int, default=[64, 256])
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--fixed-length", action="store_true",
                    help="ignore EOS on both sides: every row generates max-new-tokens")
    ap.add_argument("--out", default="rollout_speed", help="results/<out>.json")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    task = get_task("chain_sum")
    rows = []
    for size in args.sizes:
        trained = size == "nano" and args.nano_policy != "none"
        model = (load_policy(resolve_policy(args.nano_policy))[0] if trained
                 else build_policy(size, tok)).eval()
        critic = IncrementalValues(ValueModel.from_policy(model).eval())
        for bsz in args.batches:
            problems = task.sample(bsz, random.Random(bsz))
            prompts = [tok.encode(p.prompt) for p in problems]
            med = measure(model, critic, tok, prompts, args)
            rows.append({
                "size": size, "params": num_parameters(model), "batch": bsz,
                "weights": "warm-started" if trained else "random init",
                "fixed_length": args.fixed_length, "max_new_tokens": args.max_new_tokens,
                **{f"{k}_tok_s": v for k, v in med.items()},
                "lmpo_vs_generate": med["lmpo"] / med["hf_generate"],
                "fast_path_gain": med["lmpo"] / med["lmpo_hf_forward"],
                "regret_cost": med["lmpo_no_regret"] / med["lmpo"],
                "values_cost": med["lmpo_no_regret"] / med["lmpo_values"],
            })
            print(json.dumps(rows[-1]), flush=True)

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"sampling tokens/s, {args.max_new_tokens} new tokens, "
                        f"{args.threads} threads, median of {args.repeats}")
    for col in ("model", "weights", "batch", "HF generate", "lmpo", "lmpo / generate",
                "fast-path gain", "regret cost", "values cost"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(f"{r['size']} ({r['params'] / 1e6:.2f}M)", r["weights"], str(r["batch"]),
                      f"{r['hf_generate_tok_s']:.0f}", f"{r['lmpo_tok_s']:.0f}",
                      f"{r['lmpo_vs_generate']:.2f}x", f"{r['fast_path_gain']:.2f}x",
                      f"{r['regret_cost']:.2f}x",
                      f"{r['values_cost']:.2f}x")
    Console(width=150).print(table)
    write_result(args.out, {
        "note": "regret/values cost = time with / time without (1.00x = free); tokens counted "
                "up to and including EOS for both methods",
        "rows": rows,
    }, threads=args.threads)


if __name__ == "__main__":
    main()
