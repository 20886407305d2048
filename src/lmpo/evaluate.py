"""Evaluation on the fixed held-out set: exact accuracy and reward, per tier.

`accuracy` is the share of completions that are exactly correct
(`Task.is_correct`); `reward` is the mean task score, which may be partial
credit. Decoding is greedy (temperature 0) or sampled: at temperature > 0 each
problem gets `samples` completions and accuracy is their mean (pass@1 estimated from k
samples, "mean@k", as DAPO and CE-GPPO report). Sample j of a problem draws from a
stream of its own, seeded by the problem's identity and j (`stream="per_problem"`,
`lmpo.rollout.streams`): whatever the order, batch size or policy, and so with common
random numbers across arms and seeds; `stream="shared"` is the one fixed generator for the
whole set that lmpo used before (a problem's draws then depend on the batch).
The result keeps, per problem and sample, the correctness (and the reward where it is
partial credit): `records`, which the reports' variance components read.
Means are over tiers (each tier weighs the same, whatever its held-out size).
Tiers the run trained on are marked, and accuracy is also reported over the
trained tiers and over the others, so forgetting shows.
"""

from __future__ import annotations

import math

import torch

from lmpo import eval_cache
from lmpo.choices import EVAL_STREAMS
from lmpo.rewards import Reward
from lmpo.rollout import sample
from lmpo.rollout.sampler import sampling_mode
from lmpo.rollout.streams import RowStreams, problem_id, row_seed
from lmpo.tasks.base import Problem

EVAL_SAMPLE_SEED = 7_777  # sampled evaluation draws from its own fixed stream


def complete(model, tokenizer, problems: list[Problem], *, max_new_tokens: int,
             batch_size: int = 256, temperature: float = 0.0, generator=None, encode=None,
             eos_ids: list[int] | None = None, cache_as: dict | None = None) -> list[str]:
    """Completion texts (EOS stripped) for `problems`, in order. `encode` turns a prompt
    into tokens (default: the tokenizer as it is, the raw format). With `cache_as` (what
    else decides the draws, e.g. the generator's seed), the completions are read from or
    written to the evaluation cache (`lmpo.eval_cache`)."""
    encode = encode or tokenizer.encode
    prompts = [encode(p.prompt) for p in problems]
    eos = eos_ids or tokenizer.eos_token_id
    key = None
    if cache_as is not None and eval_cache.enabled():
        key = eval_cache.completion_key(model, prompts, cache_as | {
            "max_new_tokens": max_new_tokens, "batch_size": batch_size,
            "temperature": temperature, "eos": eos, "pad": tokenizer.pad_token_id})
        cached = eval_cache.load(key, len(prompts))
        if cached is not None:
            return [tokenizer.decode(ids, skip_special_tokens=True) for ids in cached]
    responses = []
    with sampling_mode(model):
        for start in range(0, len(prompts), batch_size):
            part = generator.part(start, start + batch_size) \
                if isinstance(generator, RowStreams) else generator
            r = sample(model, prompts[start:start + batch_size], max_new_tokens=max_new_tokens,
                       temperature=temperature, eos_token_id=eos,
                       pad_token_id=tokenizer.pad_token_id, generator=part)
            responses += [r.response_ids[i, :int(n)].tolist() for i, n in enumerate(r.lengths)]
    if key is not None:
        eval_cache.store(key, responses)
    return [tokenizer.decode(ids, skip_special_tokens=True) for ids in responses]


def streams_for(ids: list[str], samples: int, temperature: float, stream: str,
                seed: int = EVAL_SAMPLE_SEED):
    """(the generator of a sampled evaluation of the problems `ids` (`problem_id`) x
    `samples`, what the cache keys it by); `seed` seeds the shared stream, or every
    problem's with its identity."""
    if stream not in EVAL_STREAMS:
        raise ValueError(f"unknown evaluation stream {stream!r}; valid: {', '.join(EVAL_STREAMS)}")
    if temperature == 0:
        return None, {"seed": seed}
    if stream == "shared":
        return torch.Generator().manual_seed(seed), {"seed": seed}
    seeds = [row_seed(seed, ident, j) for ident in ids for j in range(samples)]
    return RowStreams(seeds), {"seed": seed, "stream": stream}


def sample_records(problems: list[Problem], samples: int, correct, scores,
                   ids: list[str] | None = None) -> dict:
    """Per problem (in held-out order) and sample: correct as a '0'/'1' string, and the
    reward where any differs from the correctness (partial credit or unscored). `ids`:
    the problems' `problem_id`s where already computed."""
    k = samples
    records = {"samples": k,
               "problems": ids or [problem_id(p.prompt, p.answer, p.cluster) for p in problems],
               "tiers": [p.cluster for p in problems],
               "correct": ["".join("1" if ok else "0" for ok in correct[i * k:(i + 1) * k])
                           for i in range(len(problems))]}
    if any(s is None or float(s) != float(bool(ok)) for s, ok in zip(scores, correct,
                                                                       strict=True)):
        records["reward"] = [[None if s is None else round(float(s), 6)
                              for s in scores[i * k:(i + 1) * k]] for i in range(len(problems))]
    return records


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def summarise(per_tier: dict[str, dict]) -> dict:
    """Tier-macro means of a {tier: {accuracy, reward, n, trained}} mapping."""
    tiers = {k: v for k, v in per_tier.items() if v["n"] > 0}
    trained = [v["accuracy"] for v in tiers.values() if v["trained"]]
    other = [v["accuracy"] for v in tiers.values() if not v["trained"]]
    return {
        "per_tier": per_tier,
        "accuracy_mean": _mean(v["accuracy"] for v in tiers.values()),
        "reward_mean": _mean(v["reward"] for v in tiers.values() if v["reward"] is not None),
        "accuracy_trained": _mean(trained),
        "accuracy_other": _mean(other),
        "n": sum(v["n"] for v in per_tier.values()),
        "trained_tiers": [k for k, v in per_tier.items() if v["trained"]],
    }


@torch.no_grad()
def evaluate(model, tokenizer, task, problems: list[Problem], *, max_new_tokens: int,
             trained_tiers: list[str] | None = None, temperature: float = 0.0,
             samples: int = 1, batch_size: int = 256, reward: Reward | None = None,
             encode=None, eos_ids: list[int] | None = None, cache: bool = False,
             stream: str = "per_problem", stream_seed: int = EVAL_SAMPLE_SEED) -> dict:
    """Completions of `problems`, scored per tier (see the module docstring).

    `trained_tiers` None means every tier was trained on. `samples` > 1 needs a
    temperature > 0 (greedy decoding would repeat itself). `reward` scores the completions
    (default: the task's scorer); a score of None counts as not correct and is left out
    of the reward mean. With `cache`, the completions come from the evaluation cache when
    every input is the same (`lmpo.eval_cache`): the same texts, so the same result.
    `stream`: per_problem | shared (see the module docstring), seeded by `stream_seed`
    (another seed: an independent replicate of the same evaluation).
    """
    if samples < 1 or (samples > 1 and temperature == 0):
        raise ValueError(f"samples must be >= 1, and 1 for greedy decoding; got {samples} at "
                         f"temperature {temperature}")
    ids = [problem_id(p.prompt, p.answer, p.cluster) for p in problems]  # once: both use it
    generator, drawn_by = streams_for(ids, samples, temperature, stream, stream_seed)
    held = problems
    problems = [p for p in problems for _ in range(samples)]
    texts = complete(model, tokenizer, problems, max_new_tokens=max_new_tokens,
                     batch_size=batch_size, temperature=temperature, generator=generator,
                     encode=encode, eos_ids=eos_ids, cache_as=drawn_by if cache else None)
    scores, correct = (reward or Reward("task", task)).score(problems, texts,
                                                             where="held-out problem")
    hits: dict[str, list[float]] = {tier: [] for tier in task.clusters}
    rewards: dict[str, list[float]] = {tier: [] for tier in task.clusters}
    for p, score, ok in zip(problems, scores, correct, strict=True):
        if score is not None:
            rewards.setdefault(p.cluster, []).append(score)
        hits.setdefault(p.cluster, []).append(float(ok))
    trained = set(task.clusters if trained_tiers is None else trained_tiers)
    per_tier = {tier: {"accuracy": _mean(hits[tier]), "reward": _mean(rewards.get(tier, [])),
                       "n": len(hits[tier]) // samples, "trained": tier in trained}
                for tier in hits}  # a tier with no held-out problem has None, not 0
    return summarise(per_tier) | {
        "decoding": decoding_name(temperature, samples),
        "stream": stream if temperature > 0 else "greedy",
        "records": sample_records(held, samples, correct, scores, ids)}


def decoding_name(temperature: float, samples: int) -> str:
    return "greedy" if temperature == 0 else f"mean@{samples}, T={temperature:g}"


def metrics_row(result: dict) -> dict[str, float]:
    """The `eval/...` keys of a metrics row."""
    row = {}
    for tier, v in result["per_tier"].items():
        if v["n"]:
            row[f"eval/accuracy/{tier}"] = v["accuracy"]
            if v["reward"] is not None:  # None: every completion of the tier went unscored
                row[f"eval/reward/{tier}"] = v["reward"]
    for key in ("accuracy_mean", "reward_mean", "accuracy_trained", "accuracy_other"):
        if result[key] is not None:
            row[f"eval/{key}"] = result[key]
    return row


def result_from_row(row: dict, before: dict) -> dict:
    """Rebuild an evaluation result from a metrics row (tiers, sizes and decoding as in
    `before`)."""
    per_tier = {tier: {"accuracy": row.get(f"eval/accuracy/{tier}", math.nan if v["n"] else None),
                       "reward": row.get(f"eval/reward/{tier}", math.nan if v["n"] else None),
                       "n": v["n"], "trained": v["trained"]}
                for tier, v in before["per_tier"].items()}
    return summarise(per_tier) | {"decoding": before.get("decoding", "greedy")} | (
        {"stream": before["stream"]} if "stream" in before else {})


def _pct(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x * 100:.1f}%"


def accuracy_table(results: dict[str, dict], title: str = "held-out evaluation"):
    """A rich Table: per tier, exact accuracy and mean reward (partial credit) of each result.

    Trained tiers are marked `*`; the last rows give the tier means, over all tiers,
    the trained tiers and the others.
    """
    from rich.table import Table

    decoding = next(iter(results.values())).get("decoding", "greedy")
    table = Table(title=f"{title} ({decoding})",
                  caption="accuracy = exactly correct; reward = mean of reward.fn (the task's "
                          "score by default: partial credit); * = trained on")
    table.add_column("tier")
    table.add_column("n", justify="right")
    for name in results:
        table.add_column(f"{name} accuracy", justify="right")
        table.add_column(f"{name} reward", justify="right")
    first = next(iter(results.values()))
    for tier, v in first["per_tier"].items():
        cells = []
        for r in results.values():
            t = r["per_tier"].get(tier, {})
            cells += [_pct(t.get("accuracy")), _pct(t.get("reward"))]
        table.add_row(tier + (" *" if v["trained"] else ""), str(v["n"]), *cells)
    table.add_section()
    table.add_row("mean", str(first["n"]),
                  *[c for r in results.values()
                    for c in (_pct(r["accuracy_mean"]), _pct(r["reward_mean"]))])
    if first["accuracy_other"] is not None:
        table.add_row("trained", "", *[c for r in results.values()
                                             for c in (_pct(r["accuracy_trained"]), "")])
        table.add_row("other", "", *[c for r in results.values()
                                           for c in (_pct(r["accuracy_other"]), "")])
    return table
