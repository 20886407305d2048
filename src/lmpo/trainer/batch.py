"""Turning a rollout into training tensors: scores, rewards, policy log-probs."""

from __future__ import annotations

import torch

from lmpo.logprobs import logprobs_and_entropy
from lmpo.rollout import Rollout
from lmpo.rollout.sampler import positions


class ScorerError(RuntimeError):
    pass


def score_rollout(task, problems, tokenizer, rollout: Rollout, *, r_fail: float,
                  on_error: str) -> tuple[torch.Tensor, list[str], int]:
    """Task scores per sequence; early-stopped sequences get r_fail (absorbing failure).

    Returns (scores [B], completion texts, number of scorer errors scored as 0).
    """
    scores, texts, errors = [], [], 0
    for i, problem in enumerate(problems):
        n = int(rollout.lengths[i])
        text = tokenizer.decode(rollout.response_ids[i, :n], skip_special_tokens=True)
        texts.append(text)
        if rollout.stop_reason[i] == "early_stop":
            scores.append(r_fail)
            continue
        try:
            scores.append(float(task.score(problem, text)))
        except Exception as exc:
            if on_error != "zero":
                raise ScorerError(f"task scorer raised {type(exc).__name__}: {exc} on sample {i} "
                                  f"(prompt {problem.prompt!r}, completion {text!r})") from exc
            scores.append(0.0)
            errors += 1
    return torch.tensor(scores, dtype=torch.float32), texts, errors


def forward_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                     temperature: float = 1.0, with_entropy: bool = True):
    """log pi(response token) and entropy at every response position.

    ids/mask: [B, P+T] prompt + response; response_ids [B, T]. -> ([B, T], [B, T])
    """
    t = response_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask),
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
