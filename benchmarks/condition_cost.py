"""What each new rollout condition costs per training step, against the plain step, in one
process: `lmpo train` with the group testbed (`grpo`, the warm-started nano policy) under
each condition, the variants interleaved round by round; the median `time/step` per
generated token over each run's steps (responses differ in length between conditions,
so seconds per token compare the same work), and its ratio to the plain step. Run-to-run
noise at this length is several percent, so each correction's own arithmetic is also timed
alone (its function on a testbed batch's shape, 200 calls) as a share of the plain step.

Conditions: fp8_e4m3 rollouts (W8A8, the default), staleness 2, and each rollout
correction kind. A correction runs a float32 recompute of the behaviour log-probs on
every step (verl's decoupled mode does the same), which the plain step runs only on its
diagnostic steps; the plain step with `rollout.old_logp: recompute` is timed too, so the
correction's own arithmetic is the difference to that one.

    python benchmarks/condition_cost.py [--steps 12] [--rounds 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
from common import write_result

from lmpo.config import load_config
from lmpo.rollout import get_correction, list_corrections
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig
from lmpo.warmstart import resolve_policy

KINDS = ("tis", "seq_tis", "icepop", "mis", "seq_mask_tis", "rs_token_k1", "rs_seq_mean_k3")


def conditions(kinds=KINDS) -> dict[str, list[str]]:
    out = {"plain": [], "plain_recompute": ["rollout.old_logp=recompute"],
           "fp8_e4m3": ["rollout.dtype=fp8_e4m3"], "staleness_2": ["rollout.staleness=2"]}
    for kind in kinds:
        assert kind in list_corrections()
        out[f"correction_{kind}"] = [f"rollout.correction.kind={kind}"]
    return out


def per_token(run_dir: Path) -> float:
    rows = read_rows(run_dir / "metrics.jsonl")[1:]  # the first step warms up
    return statistics.median(r["time/step"] / r["tokens/generated"] for r in rows)


def own_seconds(kind: str, batch: int = 64, length: int = 24, calls: int = 200) -> float:
    """Seconds per call of the correction's function on a [batch, length] log-ratio."""
    g = torch.Generator().manual_seed(0)
    log_ratio = 0.05 * torch.randn(batch, length, generator=g)
    mask = (torch.arange(length)[None, :] < torch.randint(4, length + 1, (batch, 1), generator=g))
    fn = get_correction(kind)
    fn(log_ratio * mask, mask.float())
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(log_ratio * mask, mask.float())
    return (time.perf_counter() - t0) / calls


def step_seconds(run_dir: Path) -> float:
    return statistics.median(r["time/step"] for r in read_rows(run_dir / "metrics.jsonl")[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--policy", default="nano-chain-sum", help="an SFT preset or a folder")
    ap.add_argument("--corrections", nargs="+", default=list(KINDS), choices=KINDS,
                    help="the correction kinds timed (default: all)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    policy = resolve_policy(args.policy)
    common = [f"policy={policy}", f"steps={args.steps}", "log.eval_every=100000",
              "log.checkpoint_every=100000", "log.tensorboard=false", "log.eval_per_tier=2",
              f"threads={args.threads}"]
    times: dict[str, list[float]] = {k: [] for k in conditions(args.corrections)}
    plain_steps: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, extra in conditions(args.corrections).items():
                cfg = load_config(TrainConfig, "grpo", [*common, *extra])
                run = Path(tmp) / f"{name}-{r}"
                train(cfg, run, progress=False)
                times[name].append(per_token(run))
                if name == "plain":
                    plain_steps.append(step_seconds(run))
    base = statistics.median(times["plain"])
    recompute = statistics.median(times["plain_recompute"])
    out = {}
    for name, ts in times.items():
        t = statistics.median(ts)
        out[name] = {"s_per_token": t, "x_plain": t / base, "x_plain_recompute": t / recompute}
        print(f"{name:26s} {t * 1e6:8.1f} us/token  {t / base:5.2f}x plain  "
              f"{t / recompute:5.2f}x plain with recompute")
    step = statistics.median(plain_steps)
    own = {}
    for kind in args.corrections:
        t = own_seconds(kind)
        own[kind] = {"seconds": t, "share_of_plain_step": t / step}
        print(f"{kind:26s} own arithmetic {t * 1e3:7.3f} ms = {t / step:.2%} of a plain step "
              f"({step * 1e3:.0f} ms)")
    write_result("condition_cost", {"preset": "grpo", "steps": args.steps,
                                    "rounds": args.rounds, "results": out,
                                    "plain_step_seconds": step, "correction_own": own},
                 threads=args.threads)


if __name__ == "__main__":
    main()
