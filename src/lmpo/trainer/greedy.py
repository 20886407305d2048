"""A baseline per prompt: its greedy response, decoded beside the sampled group.

An estimator registered with `wants_baselines` (the run's or a comparator's) makes every
generation round also decode, with the model that sampled the round (the stale one where
`rollout.staleness` says so), one response per prompt at temperature 0, without the
rollout controller, and score it with the run's reward. Each sampled response's score is
annotated with its prompt's greedy score (`Score.baseline`). The greedy tokens count in
the rollout's `num_generated` (tokens/generated), as the compute they cost; they never
enter the update.
"""

from __future__ import annotations

from dataclasses import replace

from lmpo.advantages import advantage_meta
from lmpo.rewards import RewardError
from lmpo.rewards.multi import Score
from lmpo.rollout import sample
from lmpo.trainer.advantage import run_estimators
from lmpo.trainer.batch import score_rollout


def wants_greedy(cfg) -> bool:
    """The run's estimator or one of its comparators' asks for greedy baselines."""
    return any(advantage_meta(n)["wants_baselines"] for n in run_estimators(cfg))


def add_greedy_baselines(model, rt, cfg, problems, scores, rollout):
    """(scores with `baseline` set, the rollout with the greedy tokens counted) for a round
    whose `problems` repeat each prompt `cfg.rollout.group_size` times in a row."""
    group = cfg.rollout.group_size
    prompts = problems[::group]
    greedy = sample(model, [rt.encode(p.prompt) for p in prompts],
                    max_new_tokens=cfg.rollout.max_new_tokens, temperature=0.0,
                    eos_token_id=rt.stop_ids, pad_token_id=rt.tokenizer.pad_token_id,
                    record_regret=False)
    base, _, _ = score_rollout(rt.reward, prompts, greedy.texts(rt.tokenizer),
                               greedy.stop_reason, stop_score=None, on_error=cfg.scorer_errors,
                               train=False)
    for q, b in enumerate(base):
        if b is None:
            raise RewardError(f"the reward gave no score to the greedy response of prompt "
                              f"{prompts[q].prompt!r}: the estimator needs it as the "
                              "baseline of that prompt's group")
    out = [None if s is None else Score.of(s, baseline=base[i // group])
           for i, s in enumerate(scores)]
    return out, replace(rollout, num_generated=rollout.num_generated + greedy.num_generated)
