"""The doses of the DRPO-under-FP4 fourth edition's levels: the mean |log pi_rollout -
log pi_float32| per sampled token of the nano warm start, as benchmarks/rollout_mismatch.py
measures it (32 chain-sum prompts x 4 samples, 24 tokens, seed 0), for bfloat16, FP8,
NVFP4, and NVFP4 with the first and last decoder layers kept in bf16.

    python experiments/drpo4_doses.py --out experiments/results/drpo4_doses.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from rollout_mismatch import mismatch  # noqa: E402

from lmpo.models import PromptEncoder, load_policy  # noqa: E402
from lmpo.tasks import get_task  # noqa: E402
from lmpo.warmstart import resolve_policy  # noqa: E402

LEVELS = {"bfloat16": ("bfloat16", False), "fp8_e4m3": ("fp8_e4m3", False),
          "fp4_e2m1": ("fp4_e2m1", False), "fp4_e2m1_bf16_boundary": ("fp4_e2m1", True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="experiments/results/drpo4_doses.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    problems = get_task("chain_sum").sample(32, random.Random(0))
    policy, tok = load_policy(resolve_policy("nano-chain-sum"))
    policy.eval()
    encode = PromptEncoder(tok, "auto")
    prompts = [encode(p.prompt) for p in problems for _ in range(4)]
    out = {name: mismatch(policy, tok, prompts, dtype, True, 24, 0, bf16_boundary=edge)
           for name, (dtype, edge) in LEVELS.items()}
    for name, v in out.items():
        print(f"{name:24s} mean {v['mean']:.4f}  p99 {v['p99']:.4f}")
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
