"""The real testbed's first filter: which reasoning-gym task does SmolLM2-135M-Instruct
answer at 20-60% with responses of 32-96 tokens, before any training?

For each candidate (a task, its parameters, a system prompt or none) the pretrained model
samples `--samples` responses at temperature 1 to `--problems` problems in its chat format
(a bfloat16 sampling copy, the real testbed's rollout; up to `--max-new-tokens`), scored by
`last_number` (the last number of the response against the gold answer). One JSON line
per candidate goes to `--out`: sampled accuracy (mean@k), greedy accuracy, mean response
length, the share cut at the limit, seconds. `docs/testbed.md` says what was chosen and why;
the training runs of the chosen candidates are `experiments/testbed_search.py --grid real_*`.

    python experiments/real_testbed_survey.py --out experiments/results/real_survey.jsonl
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import statistics
import time
from pathlib import Path

import torch

from lmpo.models import PromptEncoder, load_policy, stop_token_ids
from lmpo.rewards.base import last_number
from lmpo.rollout import sample
from lmpo.tasks import get_task
from lmpo.warmstart import resolve_policy

STEP = "Solve it step by step, then give the final answer as a number."
# name -> (task, parameters, system prompt)
CANDIDATES = {
    "chain_sum_3x1": ("rg:chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1,
                                       "max_digits": 1}, None),
    "chain_sum_3x1_steps": ("rg:chain_sum", {"min_terms": 3, "max_terms": 3, "min_digits": 1,
                                             "max_digits": 1}, STEP),
    "chain_sum_2x2_steps": ("rg:chain_sum", {"min_terms": 2, "max_terms": 2, "min_digits": 2,
                                             "max_digits": 2}, STEP),
    "basic_arithmetic_2x1_steps": ("rg:basic_arithmetic", {"min_terms": 2, "max_terms": 2,
                                                           "min_digits": 1, "max_digits": 1},
                                   STEP),
    "basic_arithmetic_3x1_steps": ("rg:basic_arithmetic", {"min_terms": 3, "max_terms": 3,
                                                           "min_digits": 1, "max_digits": 1},
                                   STEP),
    "leg_counting_steps": ("rg:leg_counting", {"min_animals": 2, "max_animals": 2,
                                               "max_instances": 3}, STEP),
    "products_2x1_steps": ("rg:products", {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                           "max_digits": 1}, STEP),
    "simple_equations_steps": ("rg:simple_equations", {"min_terms": 2, "max_terms": 2,
                                                       "max_value": 20}, STEP),
    "gsm_symbolic_steps": ("rg:gsm_symbolic", {}, STEP),
}


def survey(name, model, bf16, tok, problems: int, samples: int, max_new: int) -> dict:
    task_name, params, system = CANDIDATES[name]
    task = get_task(task_name, params)
    drawn = task.sample(problems, random.Random(123))
    encode = PromptEncoder(tok, "chat", system)
    eos = stop_token_ids(model, tok)
    t0 = time.perf_counter()
    out = {}
    for label, temp, k in (("sampled", 1.0, samples), ("greedy", 0.0, 1)):
        rows = [p for p in drawn for _ in range(k)]
        r = sample(bf16, [encode(p.prompt) for p in rows], max_new_tokens=max_new,
                   temperature=temp, eos_token_id=eos, pad_token_id=tok.pad_token_id,
                   generator=torch.Generator().manual_seed(0))
        lengths = r.response_mask.sum(1).tolist()
        texts = [tok.decode(ids[:int(n)], skip_special_tokens=True)
                 for ids, n in zip(r.response_ids.tolist(), lengths, strict=True)]
        out[f"{label}_accuracy"] = statistics.mean(
            last_number(t, p.answer) for t, p in zip(texts, rows, strict=True))
        out[f"{label}_length_mean"] = statistics.mean(lengths)
        out[f"{label}_cut_frac"] = statistics.mean(n >= max_new for n in lengths)
        if label == "sampled":
            out["example"] = {"prompt": encode.render(rows[0].prompt)[-300:],
                              "response": texts[0][:400], "answer": rows[0].answer}
    return {"candidate": name, "task": task_name, "task_params": params,
            "system_prompt": system, "problems": problems, "samples": samples,
            "max_new_tokens": max_new, **out, "seconds": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--candidates", nargs="*", default=list(CANDIDATES))
    ap.add_argument("--problems", type=int, default=32)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, tok = load_policy(resolve_policy("smollm2-135m-instruct"))
    bf16 = copy.deepcopy(model).to(torch.bfloat16).eval()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    for name in a.candidates:
        row = survey(name, model, bf16, tok, a.problems, a.samples, a.max_new_tokens)
        print(json.dumps({k: v for k, v in row.items() if k != "example"}), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
