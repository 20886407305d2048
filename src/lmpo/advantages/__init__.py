"""Advantage estimators: one registry for the group family, plus GAE.

    est = get_advantage("ebpo")             # a fresh stateful instance
    adv, metrics = est(scores, group_ids)   # [B] -> [B], dict
"""

from __future__ import annotations

import torch

from lmpo.advantages import ebpo, group  # noqa: F401  (registers)
from lmpo.advantages.base import ADVANTAGES, Estimator, check_scores, group_stats
from lmpo.advantages.ebpo import EBPO, Welford
from lmpo.advantages.gae import gae


def get_advantage(name: str, **hparams) -> Estimator:
    """A new estimator `name` with `hparams`; call it as `est(scores, group_ids)`."""
    return ADVANTAGES.get(name, **hparams)


def list_advantages() -> list[str]:
    return ADVANTAGES.names()


def advantage_hparams(name: str) -> dict:
    return ADVANTAGES.hparams(name)


def nonzero_variance_groups(scores: torch.Tensor, group_ids: torch.Tensor):
    """DAPO dynamic sampling: which samples to keep.

    Returns (keep [K] long sample indices, in order, of every group whose scores
    are not all equal; number of groups dropped). The caller reports the count:
    dropping is never silent.
    """
    check_scores(scores, group_ids)
    g = group_stats(scores, group_ids)
    varied = g.std > 0  # [Q]
    keep = varied[g.index].nonzero().flatten()
    return keep, int((~varied).sum())


__all__ = [
    "EBPO", "Estimator", "Welford", "advantage_hparams", "gae", "get_advantage",
    "list_advantages", "nonzero_variance_groups",
]
