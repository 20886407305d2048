"""`lmpo rm` vs TRL's RewardTrainer, side by side in one process (run in .venv-trl).

The same pairs (the `nano-chain-sum-rm` preset's built-in chain-sum t3d1 pairs: the
same training and held-out pairs for both), the same token ids (lmpo encodes each
sequence once, prompt + completion + EOS, and TRL gets them pre-tokenised as
`chosen_ids` / `rejected_ids`), the same trunk and head initialisation (the
warm-started nano policy, head drawn from the same seed), the same loss (plain
Bradley-Terry, no margin, no centring), batch 32 pairs, AdamW at the preset's constant lr (3e-4),
no warm-up, gradient clipping at 1.0, dropout off. Held-out pair accuracy is
measured for both by the same scoring function (equal to Hugging Face's forward to
1e-5, tests/test_reward_model.py). Time per epoch: lmpo's measured around its own
epoch loop; TRL's is its `train_runtime` over the epochs. The two alternate over
rounds (TRL first in odd rounds).

    make test-trl   # builds .venv-trl
    .venv-trl/bin/python benchmarks/rm_vs_trl.py [--epochs 2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time

import torch
from common import write_result

from lmpo.config import load_config
from lmpo.reward_model_training import RMConfig, evaluate_pairs, load_trunk, make_pairs, train_epoch
from lmpo.rewards.reward_model import TextEncoder


def run_lmpo(cfg, train, held) -> dict:
    model, tok = load_trunk(cfg)
    encode = TextEncoder(tok, "raw")
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0)
    rng = random.Random(cfg.seed)
    times = []
    for _ in range(cfg.epochs):
        t0 = time.perf_counter()
        train_epoch(model, opt, train, encode, tok.pad_token_id, cfg, rng)
        times.append(time.perf_counter() - t0)
    return {"seconds_per_epoch": statistics.mean(times),
            "heldout": evaluate_pairs(model, encode, held, tok.pad_token_id)}


def run_trl(cfg, train, held) -> dict:
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    model, tok = load_trunk(cfg)
    encode = TextEncoder(tok, "raw")
    data = Dataset.from_list([{"chosen_ids": encode(p.prompt, p.chosen),
                               "rejected_ids": encode(p.prompt, p.rejected)} for p in train])
    with tempfile.TemporaryDirectory() as out:
        args = RewardConfig(output_dir=out, per_device_train_batch_size=cfg.batch_size,
                            num_train_epochs=cfg.epochs, learning_rate=cfg.lr,
                            lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
                            max_grad_norm=cfg.grad_clip, logging_steps=50, report_to="none",
                            save_strategy="no", eval_strategy="no", use_cpu=True,
                            seed=cfg.seed, disable_dropout=True, max_length=None,
                            dataloader_num_workers=0)
        trainer = RewardTrainer(model=model, args=args, train_dataset=data,
                                processing_class=tok)
        result = trainer.train()
    return {"seconds_per_epoch": result.metrics["train_runtime"] / cfg.epochs,
            "heldout": evaluate_pairs(model.cpu().float(), encode, held, tok.pad_token_id)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("overrides", nargs="*", help="key=value overrides of the rm preset")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config(RMConfig, "nano-chain-sum-rm", [f"epochs={args.epochs}", *args.overrides])
    train, held, source = make_pairs(cfg)
    print(f"{len(train)} training pairs, {len(held)} held out ({source['source']})")
    runs: dict[str, list[dict]] = {"trl": [], "lmpo": []}
    for r in range(args.rounds):
        for name in (("trl", "lmpo") if r % 2 == 0 else ("lmpo", "trl")):
            out = (run_trl if name == "trl" else run_lmpo)(cfg, train, held)
            runs[name].append(out)
            held_out = out["heldout"]
            print(f"round {r + 1} {name}: {out['seconds_per_epoch']:.2f} s/epoch, held-out "
                  f"accuracy {held_out['accuracy']:.3f}, gap {held_out['gap_mean']:.3f}")
    table = {name: {"seconds_per_epoch": statistics.median(x["seconds_per_epoch"] for x in rs),
                    "heldout_accuracy": [x["heldout"]["accuracy"] for x in rs],
                    "heldout_gap": [x["heldout"]["gap_mean"] for x in rs]}
             for name, rs in runs.items()}
    ratio = table["trl"]["seconds_per_epoch"] / table["lmpo"]["seconds_per_epoch"]
    print(f"time per epoch: TRL {table['trl']['seconds_per_epoch']:.2f} s, lmpo "
          f"{table['lmpo']['seconds_per_epoch']:.2f} s ({ratio:.2f}x)")
    write_result("rm_vs_trl", {"pairs": source | {"train": len(train), "heldout": len(held)},
                               "epochs": args.epochs, "rounds": args.rounds,
                               "results": table, "trl_over_lmpo_time": ratio},
                 threads=args.threads)


if __name__ == "__main__":
    main()
