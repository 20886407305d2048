"""The doses of the real-model DRPO edition's levels (experiments/real_drpo4.yaml): the
mean |log pi_rollout - log pi_float32| per sampled token of SmolLM2-135M-Instruct (the
warm start of base_real), as benchmarks/rollout_mismatch.py measures it, on base_real's
prompts in its chat format with its system turn: 16 training problems of the experiment's
tiers x 4 samples at T = 1, up to 128 new tokens, seed 0; for bfloat16, NVFP4 with the
first and last decoder layers kept in bf16 (the experiment's L0) and NVFP4 throughout
(for comparison with the testbed edition's levels).

    python experiments/real_drpo4_doses.py --out experiments/results/real_drpo4_doses.json
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

from lmpo.config import load_config  # noqa: E402
from lmpo.models import PromptEncoder, load_policy  # noqa: E402
from lmpo.tasks import get_task  # noqa: E402
from lmpo.trainer.train_config import TrainConfig  # noqa: E402
from lmpo.warmstart import resolve_policy  # noqa: E402

CLUSTERS = ["p2d1", "p3d1"]  # the experiment's tiers (experiments/results/real_headroom.json)
LEVELS = {"bfloat16": ("bfloat16", False), "fp4_e2m1_bf16_boundary": ("fp4_e2m1", True),
          "fp4_e2m1": ("fp4_e2m1", False)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="experiments/results/real_drpo4_doses.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    cfg = load_config(TrainConfig, "base_real")
    clusters = CLUSTERS
    task = get_task(cfg.task, cfg.task_params)
    rng = random.Random(0)
    problems = [p for tier in clusters for p in task.sample(8, rng, cluster=tier)]
    policy, tok = load_policy(resolve_policy(cfg.policy))
    policy.eval()
    encode = PromptEncoder(tok, cfg.prompt_format, cfg.system_prompt)
    prompts = [encode(p.prompt) for p in problems for _ in range(4)]
    out = {"clusters": clusters, "prompts": len(prompts), "max_new_tokens": 128}
    for name, (dtype, edge) in LEVELS.items():
        out[name] = mismatch(policy, tok, prompts, dtype, True, 128, 0, bf16_boundary=edge)
        print(f"{name:24s} mean {out[name]['mean']:.4f}  p99 {out[name]['p99']:.4f}", flush=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
