"""Turning a rollout into training tensors: scores, rewards, policy log-probs."""

from __future__ import annotations

import contextlib

import torch

from lmpo.logprobs import logprobs_and_entropy
from lmpo.masked import position_ids
from lmpo.rollout import Rollout, sample


class ScorerError(RuntimeError):
    pass


@contextlib.contextmanager
def sampling_mode(model):
    """Sample in eval mode (no dropout), then restore the model's previous mode."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def score_checked(task, problem, completion: str, where: str) -> float:
    """task.score, with any exception re-raised naming `where`, the prompt and completion."""
    try:
        return float(task.score(problem, completion))
    except Exception as exc:
        raise ScorerError(f"task scorer raised {type(exc).__name__}: {exc} on {where} "
                          f"(prompt {problem.prompt!r}, completion {completion!r})") from exc


def score_rollout(task, problems, tokenizer, rollout: Rollout, *, r_fail: float,
                  on_error: str) -> tuple[torch.Tensor, list[str], int]:
    """Task scores per sequence; early-stopped sequences get r_fail (absorbing failure).

    Returns (scores [B], completion texts, number of scorer errors scored as 0).
    """
    scores, texts, errors = [], rollout.texts(tokenizer), 0
    for i, (problem, text) in enumerate(zip(problems, texts, strict=True)):
        if rollout.stop_reason[i] == "early_stop":
            scores.append(r_fail)
            continue
        try:
            scores.append(score_checked(task, problem, text, f"sample {i}"))
        except ScorerError:
            if on_error != "zero":
                raise
            scores.append(0.0)
            errors += 1
    return torch.tensor(scores, dtype=torch.float32), texts, errors


def forward_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                     temperature: float = 1.0, with_entropy: bool = True):
    """log pi(response token) and entropy at every response position.

    ids/mask: [B, P+T] prompt + response; response_ids [B, T]. -> ([B, T], [B, T])
    """
    t = response_ids.shape[1]
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
                   temperature: float, seed: int) -> dict[str, float]:
    """ESPO diagnostics: let a copy of every early-stopped sequence run to its end.

    Returns the false-positive stop rate (share of stopped sequences whose finished
    copy is exactly correct), the mean would-have-been length and the tokens the
    copies generated past their stop (`espo/would_be_extra_tokens`, what stopping
    saved). Uses its own generator (seeded per step), so the training run's random
    stream is untouched.
    """
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
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                  generator=torch.Generator().manual_seed(seed))
    correct, lengths, saved = [], [], []
    for j, i in enumerate(stopped):
        n, extra = int(rollout.lengths[i]), min(int(rest.lengths[j]), max(room[j], 0))
        ids = rollout.response_ids[i, :n].tolist() + rest.response_ids[j, :extra].tolist()
        text = tokenizer.decode(ids, skip_special_tokens=True)
        correct.append(float(task.is_correct(problems[i], text)))
        lengths.append(n + extra)
        saved.append(extra)
    return {"espo/false_positive_rate": sum(correct) / len(correct),
            "espo/would_be_length_mean": sum(lengths) / len(lengths),
            "espo/would_be_extra_tokens": float(sum(saved))}
