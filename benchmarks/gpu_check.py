"""The GPU path, measured: sampling against Hugging Face `generate`, one full RL step at
SmolLM2-135M's size against its FLOP floor, and 50 steps of the nano testbed that learn,
all with `device: cuda`. Run by `benchmarks/gpu_check.sh` (which installs lmpo from the
wheels `make gpu-wheels` prepares); `--dry-run` runs the same code on the CPU at tiny sizes.

1. Sampling: a randomly initialised model with SmolLM2-135M's configuration (no weights
   travel), 8 prompts x G = 8 of 48 random tokens, 128 new tokens with every row running to
   the limit on both sides; lmpo's sampler vs `generate` (same model object), float32 and
   bfloat16 copies, alternated, median tokens/s.
2. One RL step: `flop_floor.measure` at the 135M size on the device (sampling + update,
   float32 and bfloat16), with its floor ratio.
3. The testbed, through the command line a user types: the nano warm start (built there
   by its SFT preset), then `lmpo train --config grpo device=cuda` for 50 steps (held-out
   accuracy before and after, the median `time/step`), then `lmpo eval --run DIR --device
   cuda` on its final policy (accuracy and wall time).

    python benchmarks/gpu_check.py --out DIR [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from common import clock
from flop_floor import SMOKE, SMOLLM2_135M, build, measure

from lmpo.cli import main as lmpo
from lmpo.rollout import sample
from lmpo.trainer.checkpoint import read_rows
from lmpo.warmstart import resolve_policy


def describe(device: str) -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__,
           "cpus": os.cpu_count(), "platform": platform.platform()}
    import transformers

    out["transformers"] = transformers.__version__
    if torch.device(device).type == "cuda":
        p = torch.cuda.get_device_properties(0)
        out |= {"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1),
                "capability": f"{p.major}.{p.minor}", "cuda": torch.version.cuda}
    return out


def sampling(config: dict, prompts: int, group: int, p: int, t: int, device: str,
             repeats: int) -> dict:
    model = build(config, device=device).eval()
    model.generation_config.eos_token_id = None  # every row runs to the limit
    gen = torch.Generator().manual_seed(0)
    drawn = [torch.randint(3, config["vocab_size"], (p,), generator=gen).tolist()
             for _ in range(prompts)]
    rows = [x for x in drawn for _ in range(group)]
    ids = torch.tensor(rows, device=device)

    def lmpo(m, seed):
        with torch.no_grad():
            r = sample(m, rows, max_new_tokens=t, eos_token_id=-1, pad_token_id=0,
                       generator=torch.Generator().manual_seed(seed))
        return int(r.response_mask.sum())

    def hf(m, seed):
        torch.manual_seed(seed)
        with torch.inference_mode():
            out = m.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=True,
                             temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=t,
                             min_new_tokens=t, pad_token_id=0)
        return int((out.shape[1] - ids.shape[1]) * out.shape[0])

    bf16 = build(config, device=device).to(torch.bfloat16).eval()
    bf16.generation_config.eos_token_id = None
    variants = {"hf_generate_fp32": lambda s: hf(model, s), "lmpo_fp32": lambda s: lmpo(model, s),
                "hf_generate_bf16": lambda s: hf(bf16, s), "lmpo_bf16": lambda s: lmpo(bf16, s)}
    tps: dict[str, list[float]] = {k: [] for k in variants}
    for rep in range(repeats + 1):
        for name, fn in variants.items():
            t0 = clock(device)
            n = fn(rep)
            dt = clock(device) - t0
            if rep:  # the first round warms up
                tps[name].append(n / dt)
    med = {k: statistics.median(v) for k, v in tps.items()}
    return {"rows": len(rows), "prompt_tokens": p, "new_tokens": t,
            **{f"{k}_tok_s": v for k, v in med.items()},
            "lmpo_vs_generate_fp32": med["lmpo_fp32"] / med["hf_generate_fp32"],
            "lmpo_vs_generate_bf16": med["lmpo_bf16"] / med["hf_generate_bf16"]}


def testbed(device: str, steps: int, dry_run: bool, work: Path) -> dict:
    sft = ("steps=20", "eval_per_tier=2") if dry_run else ()
    if dry_run:  # a 20-step warm start must not enter the user's cache
        os.environ["LMPO_HOME"] = str(work / "home")
    policy = resolve_policy("nano-chain-sum", progress=False, sft_overrides=sft)
    run = work / "testbed"
    code = lmpo(["train", "--config", "grpo", "--run-dir", str(run), "--quiet",
                 f"policy={policy}", f"steps={steps}", f"device={device}",
                 "log.tensorboard=false", f"log.eval_every={steps}",
                 "log.checkpoint_every=100000", *(["log.eval_per_tier=2"] if dry_run else [])])
    if code != 0:
        sys.exit(f"gpu_check: lmpo train exited {code}")
    summary = json.loads((run / "eval.json").read_text())
    rows = read_rows(run / "metrics.jsonl")
    before, after = summary["before"], summary["after"]
    t0 = time.perf_counter()
    code = lmpo(["eval", "--run", str(run), "--device", device, "--json",
                 str(work / "eval_cli.json"), *(["--per-tier", "2"] if dry_run else [])])
    if code != 0:
        sys.exit(f"gpu_check: lmpo eval exited {code}")
    evaluated = json.loads((work / "eval_cli.json").read_text())
    return {"preset": "grpo", "steps": steps, "device": device,
            "heldout_trained_before": before.get("accuracy_trained"),
            "heldout_trained_after": after.get("accuracy_trained"),
            "reward_first10": statistics.mean(r["reward/mean"] for r in rows[:10]),
            "reward_last10": statistics.mean(r["reward/mean"] for r in rows[-10:]),
            "time_per_step_s": statistics.median(r["time/step"] for r in rows[1:] or rows),
            "lmpo_eval_accuracy_trained": evaluated.get("accuracy_trained"),
            "lmpo_eval_seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for gpu_check.json")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, same code")
    ap.add_argument("--testbed-steps", type=int, default=50)
    args = ap.parse_args()
    device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        sys.exit("gpu_check: torch sees no CUDA device (use --dry-run on a CPU)")
    torch.set_num_threads(2 if args.dry_run else min(8, os.cpu_count() or 1))
    result = {"dry_run": args.dry_run, "machine": describe(device)}
    print(json.dumps(result["machine"]), flush=True)
    if args.dry_run:
        c, prompts, group, p, t = SMOKE["135m"]
        result["sampling"] = sampling(c, prompts, group, p, t, device, repeats=1)
    else:
        result["sampling"] = sampling(SMOLLM2_135M, 8, 8, 48, 128, device, repeats=3)
    print("sampling", json.dumps(result["sampling"]), flush=True)
    result["rl_step"] = [measure("135m", dtype, 1 if args.dry_run else 3, args.dry_run,
                                 2 if args.dry_run else 10, device)
                         for dtype in ("float32", "bfloat16")]
    with tempfile.TemporaryDirectory() as tmp:
        steps = 2 if args.dry_run else args.testbed_steps
        result["testbed"] = testbed(device, steps, args.dry_run, Path(tmp))
    print("testbed", json.dumps(result["testbed"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out / 'gpu_check.json'}")


if __name__ == "__main__":
    main()
