"""A reward model's pair accuracy on chain-sum tiers it did not train on, scored three ways.

Pairs: for 40 problems of each of t2d1, t2d2 and t4d2 (nano-chain-sum-rm trains on t3d1
only), the worked solution against its wrong-final-number edit (`perturbations`). Each
pair is scored

- by lmpo's scorer (`ModelReward.raw_scores`: the prompt in the RM's format, the
  completion, EOS; the head read at the last attended token), the one RL uses;
- by plain Hugging Face `AutoModelForSequenceClassification` on the same prompt and
  completion tokens *without* EOS, right-padded (Hugging Face pools at the last token
  that is not the pad token);
- the same with EOS appended, as lmpo scores.

t3d1 pairs (the tier it trained on, problems outside its training draw) are printed
for context. `--fresh` trains the preset into a new, empty cache first.

    python experiments/rm_unseen_tiers.py --fresh --out experiments/results/rm_unseen_tiers.json
    python experiments/rm_unseen_tiers.py /path/to/rm/folder [...]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time

import torch

from lmpo.rewards.preferences import perturbations
from lmpo.rewards.reward_model import ModelReward, pad_batch
from lmpo.tasks import get_task

UNSEEN = ("t2d1", "t2d2", "t4d2")
PER_TIER = 40


def tier_pairs(tiers, seed: int = 0) -> dict[str, tuple[list[str], list[str], list[str]]]:
    task = get_task("chain_sum")
    rng = random.Random(seed)
    out = {}
    for tier in tiers:
        prompts, chosen, rejected = [], [], []
        for problem in task.sample(PER_TIER, rng, cluster=tier):
            solution, _no_answer, wrong, *_ = perturbations(task, problem, rng)
            prompts.append(problem.prompt)
            chosen.append(solution)
            rejected.append(wrong)
        out[tier] = (prompts, chosen, rejected)
    return out


class _Checker:  # ModelReward's checker: only its task is read here
    task = get_task("chain_sum")


@torch.no_grad()
def hf_scores(rm: ModelReward, prompts, completions, eos: bool) -> torch.Tensor:
    """Hugging Face's own forward and pooling (its `pad_token_id`), right padding."""
    seqs = []
    for p, c in zip(prompts, completions, strict=True):
        ids = rm.encode(p, c)  # prompt in the RM's format + completion + EOS
        seqs.append(ids if eos else ids[:-1])
    ids, mask = pad_batch(seqs, rm.tokenizer.pad_token_id)
    return rm.model(input_ids=ids, attention_mask=mask).logits.squeeze(-1).float()


def score_folder(folder: str, pairs) -> dict:
    rm = ModelReward(folder, _Checker(), micro_batch_size=64)
    ways = {"lmpo scorer": lambda p, c: rm.raw_scores(p, c),
            "HF, no EOS": lambda p, c: hf_scores(rm, p, c, eos=False),
            "HF, with EOS": lambda p, c: hf_scores(rm, p, c, eos=True)}
    out = {}
    for way, fn in ways.items():
        per_tier, gaps = {}, []
        for tier, (prompts, chosen, rejected) in pairs.items():
            gap = fn(prompts, chosen) - fn(prompts, rejected)
            per_tier[tier] = round(float((gap > 0).double().mean()), 3)
            if tier in UNSEEN:
                gaps.append(gap)
        gap = torch.cat(gaps)
        out[way] = {"unseen_accuracy": round(float((gap > 0).double().mean()), 3),
                    "unseen_pairs": len(gap), "mean_gap": round(float(gap.mean()), 3),
                    "per_tier": per_tier}
        print(f"{folder} [{way}]: unseen tiers {out[way]['unseen_accuracy']:.3f} of "
              f"{len(gap)} pairs (mean gap {out[way]['mean_gap']:.3f}); per tier {per_tier}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--fresh", action="store_true",
                    help="train nano-chain-sum-rm into a new, empty LMPO_HOME first")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(2)
    pairs = tier_pairs((*UNSEEN, "t3d1"))
    folders, record = list(args.folders), {}
    if args.fresh:
        home = tempfile.mkdtemp(prefix="lmpo-home-")
        os.environ["LMPO_HOME"] = home
        from lmpo.reward_model_training import resolve_reward_model

        started = time.time()
        folders.append(str(resolve_reward_model("nano-chain-sum-rm", progress=False)))
        record["fresh_cache"] = {"built_s": round(time.time() - started),
                                 "entry": os.path.basename(folders[-1])}
        heldout = json.loads(open(os.path.join(folders[-1], "eval.json")).read())
        record["fresh_cache"]["heldout_accuracy"] = heldout["heldout"]["accuracy"]
    if not folders:
        ap.error("give reward-model folders or --fresh")
    record["results"] = {("fresh " + os.path.basename(f)) if args.fresh and f == folders[-1]
                         else f: score_folder(f, pairs) for f in folders}
    record["pairs"] = {"tiers": list(pairs), "per_tier": PER_TIER,
                       "kind": "worked solution vs its wrong-final-number edit"}
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
