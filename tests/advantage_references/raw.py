"""NeMo-RL's raw reward: the score, or with normalize its token-weighted whitening with a
population variance clamped at 1e-8."""

from __future__ import annotations

import math

from tests.advantage_references import reference


@reference("raw_reward", cases=[{}, {"normalize": True}])
def raw_reward(scores, groups, lengths, *, normalize=False):
    if not normalize:
        return list(scores)
    total = max(sum(lengths), 1)
    mu = sum(n * s for n, s in zip(lengths, scores, strict=True)) / total
    var = sum(n * (s - mu) ** 2 for n, s in zip(lengths, scores, strict=True)) / total
    return [(s - mu) / math.sqrt(max(var, 1e-8)) for s in scores]
