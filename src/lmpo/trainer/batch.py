"""Turning a rollout into training tensors: scores, rewards, policy log-probs."""

from __future__ import annotations

import torch

from lmpo.rewards import Reward, RewardError
from lmpo.trainer.prefix import response_logprobs


def score_rollout(reward: Reward, problems, texts: list[str], stop_reason: list[str], *,
                  stop_score: float | None, on_error: str, train: bool = True
                  ) -> tuple[list[float | None], list[bool], int]:
    """Scores per sequence (None = no score), exact correctness, and the number of samples
    whose reward function raised and were scored 0 (`on_error="zero"`; "raise" re-raises
    the `RewardError` that names the sample). A sequence the rollout controller stopped
    gets `stop_score` and is never correct (an absorbing failure), or, with `stop_score`
    None, is scored like any other (an ordinary truncation). `train=False` scores without
    counting in the reward's training statistics (a greedy baseline)."""
    live = [i for i, r in enumerate(stop_reason) if stop_score is None or r != "early_stop"]
    scores: list[float | None] = [stop_score] * len(problems)
    correct = [False] * len(problems)
    errors = 0
    try:
        got, ok = reward.score([problems[i] for i in live], [texts[i] for i in live],
                               index=live, train=train)
        pairs = list(zip(got, ok, strict=True))
    except RewardError:
        if on_error != "zero":
            raise
        pairs = []
        for i in live:  # find the failing samples; they score 0
            try:
                one, good = reward.score([problems[i]], [texts[i]], index=[i], train=train)
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
    """log pi(response token) and entropy at every response position (0 past a response).

    ids/mask: [B, P+T] prompt + response; response_ids [B, T]. -> ([B, T], [B, T])
    The rows run in length buckets, each cut at its longest response, and with
    `share_prompts` each distinct prompt runs once (`lmpo.trainer.prefix`): same values
    and gradients as one padded pass, less work.
    """
    device = next(model.parameters()).device
    ids, mask, response_ids = ids.to(device), mask.to(device), response_ids.to(device)
    logp, ent = response_logprobs(model, ids, mask, response_ids, temperature,
                                  share_prompts=share_prompts)
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
