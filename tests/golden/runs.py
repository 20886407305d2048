"""Golden runs: short testbed runs whose metrics rows must stay bit-identical while the
trainer's middle is redesigned (tests/test_golden.py). Each covers a path through the
trainer: PPO with GAE and a critic, GRPO with a rollout correction on bf16 rollouts, a
rollout controller (ESPO, with its critic), same-batch comparators, and a resume.

    python -m tests.golden.runs    # rewrite tests/golden/rows.json on this machine
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
TINY = ["steps=3", "rollout.batch_size=16", "rollout.max_new_tokens=8", "rollout.pool_size=64",
        "optim.minibatches=2", "log.eval_per_tier=4", "log.eval_every=3",
        "log.tensorboard=false", "log.eval_max_new_tokens=6", "log.policy_kl_every=2",
        "threads=1", "log.eval_stream=shared"]  # the stream the rows were written with
RUNS = {
    "ppo_gae": ("ppo_clip", []),
    "grpo_correction": ("grpo", ["rollout.dtype=bfloat16", "rollout.correction={kind: tis}",
                                 "rollout.staleness=1"]),
    "espo_controller": ("espo", []),
    "grpo_comparators": ("grpo", [
        "log.comparators={ebpo: {advantage: {name: ebpo}}, cispo: {loss: {name: cispo, "
        "agg: token-mean}}, stop: {controller: {name: random_stop, hparams: "
        "{savings: 0.3}}}}"]),
}
RESUMED = ("grpo", ["steps=4"])  # 2 steps, then resumed to 4: the rows of a straight 4


def machine_key() -> str:
    """What bit-identical float results depend on: the CPU, torch, the thread count."""
    import torch

    from lmpo.process_env import cpu_model

    return f"{platform.machine()} | {cpu_model()} | torch {torch.__version__}"


def plain(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def produce(policy: Path, work: Path) -> dict[str, list[dict]]:
    """Every golden run's rows (wall times left out)."""
    from lmpo.config import load_config
    from lmpo.trainer.checkpoint import read_rows
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    out = {}
    for name, (preset, extra) in RUNS.items():
        cfg = load_config(TrainConfig, preset, [f"policy={policy}", *TINY, *extra])
        train(cfg, work / name, progress=False)
        out[name] = plain(read_rows(work / name / "metrics.jsonl"))
    preset, extra = RESUMED
    base = [f"policy={policy}", *TINY, *extra]
    train(load_config(TrainConfig, preset, [*base, "steps=2"]), work / "resumed",
          progress=False)
    train(load_config(TrainConfig, preset, base), work / "resumed", resume=True,
          progress=False)
    out["grpo_resumed"] = plain(read_rows(work / "resumed" / "metrics.jsonl"))
    return out


def tiny_policy(folder: Path) -> Path:
    """The random nano policy of tests/conftest.py's `tiny_policy_dir`."""
    from lmpo.models import build_policy, build_tokenizer, save_policy

    tok = build_tokenizer()
    save_policy(build_policy("nano", tok, seed=0), tok, folder)
    return folder


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        rows = produce(tiny_policy(Path(tmp) / "policy"), Path(tmp) / "runs")
    path = HERE / "rows.json"
    saved = json.loads(path.read_text()) if path.exists() else {}
    saved[machine_key()] = rows
    path.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    print(f"{path}: {machine_key()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
