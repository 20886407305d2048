"""Turning a rollout into training tensors: scores, rewards, policy log-probs."""

from __future__ import annotations

import torch

from lmpo.logprobs import logprobs_and_entropy
from lmpo.masked import position_ids
from lmpo.rewards import Reward, RewardError
from lmpo.rollout import Rollout, sample
from lmpo.trainer.prefix import shared_prefix_logits


def score_rollout(reward: Reward, problems, texts: list[str], stop_reason: list[str], *,
                  r_fail: float, on_error: str
                  ) -> tuple[list[float | None], list[bool], int]:
    """Scores per sequence (None = no score), exact correctness, and the number of samples
    whose reward function raised and were scored 0 (`on_error="zero"`; "raise" re-raises
    the `RewardError` that names the sample). Early-stopped sequences get r_fail
    (absorbing failure) and are never correct."""
    live = [i for i, r in enumerate(stop_reason) if r != "early_stop"]
    scores: list[float | None] = [r_fail] * len(problems)
    correct = [False] * len(problems)
    errors = 0
    try:
        got, ok = reward.score([problems[i] for i in live], [texts[i] for i in live],
                               index=live, train=True)
        pairs = list(zip(got, ok, strict=True))
    except RewardError:
        if on_error != "zero":
            raise
        pairs = []
        for i in live:  # find the failing samples; they score 0
            try:
                one, good = reward.score([problems[i]], [texts[i]], index=[i], train=True)
                pairs.append((one[0], good[0]))
            except RewardError:
                pairs.append((0.0, False))
                errors += 1
    for i, (s, ok) in zip(live, pairs, strict=True):
        scores[i], correct[i] = s, ok
    return scores, correct, errors


def forward_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                     temperature: float = 1.0, with_entropy: bool = True,
                     share_prompts: bool = True):
    """log pi(response token) and entropy at every response position.

    ids/mask: [B, P+T] prompt + response; response_ids [B, T]. -> ([B, T], [B, T])
    `share_prompts` runs each distinct prompt once (`lmpo.trainer.prefix`): same values
    and gradients, less work when prompts repeat.
    """
    t = response_ids.shape[1]
    device = next(model.parameters()).device
    ids, mask, response_ids = ids.to(device), mask.to(device), response_ids.to(device)
    logits = shared_prefix_logits(model, ids, mask, t) if share_prompts else None
    if logits is None:
        logits = model(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask),
                       logits_to_keep=t + 1).logits[:, :t]
    if temperature != 1.0:
        logits = logits / temperature
    logp, ent = logprobs_and_entropy(logits, response_ids)
    return logp, (ent if with_entropy else None)


def critic_values(critic, ids: torch.Tensor, mask: torch.Tensor, t: int) -> torch.Tensor:
    """V(s_t) before each response token.  # [B, P+T] -> [B, T]"""
    return critic.values(ids, mask)[:, -t - 1:-1]


def explained_variance(values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor) -> float:
    m = mask.bool()
    v, r = values[m].double(), returns[m].double()
    if r.numel() < 2 or float(r.var()) == 0:
        return 0.0
    return float(1 - (r - v).var() / r.var())


def finish_stopped(policy, tokenizer, task, problems, rollout: Rollout, *, max_new_tokens: int,
                   temperature: float, seed: int, reward: Reward | None = None,
                   eos_ids: list[int] | None = None) -> dict[str, float]:
    """ESPO diagnostics: let a copy of every early-stopped sequence run to its end.

    Returns the false-positive stop rate (share of stopped sequences whose finished
    copy is exactly correct), the mean would-have-been length and the tokens the
    copies generated past their stop (`espo/would_be_extra_tokens`, what stopping
    saved). Uses its own generator (seeded per step), so the training run's random
    stream is untouched. Correctness is the `reward`'s (default: the task's scorer).
    """
    reward = reward or Reward("task", task)
    stopped = [i for i, r in enumerate(rollout.stop_reason) if r == "early_stop"]
    if not stopped:
        return {}
    prefixes, room = [], []
    for i in stopped:
        n = int(rollout.lengths[i])
        prompt = rollout.prompt_ids[i][rollout.prompt_mask[i].bool()].tolist()
        prefixes.append(prompt + rollout.response_ids[i, :n].tolist())
        room.append(max_new_tokens - n)
    rest = sample(policy, prefixes, max_new_tokens=max(1, max(room)), temperature=temperature,
                  eos_token_id=eos_ids or tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id,
                  generator=torch.Generator().manual_seed(seed))
    texts, lengths, saved = [], [], []
    for j, i in enumerate(stopped):
        n, extra = int(rollout.lengths[i]), min(int(rest.lengths[j]), max(room[j], 0))
        ids = rollout.response_ids[i, :n].tolist() + rest.response_ids[j, :extra].tolist()
        texts.append(tokenizer.decode(ids, skip_special_tokens=True))
        lengths.append(n + extra)
        saved.append(extra)
    correct = [float(ok) for ok in reward.score([problems[i] for i in stopped], texts)[1]]
    return {"espo/false_positive_rate": sum(correct) / len(correct),
            "espo/would_be_length_mean": sum(lengths) / len(lengths),
            "espo/would_be_extra_tokens": float(sum(saved))}
