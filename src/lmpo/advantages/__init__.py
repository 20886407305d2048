"""Advantage estimators: one registry for the group family and GAE.

    est = get_advantage("ebpo")                              # a fresh stateful instance
    adv, metrics = est(scores, group_ids, clusters=tiers)    # [B] -> [B], dict

`gae` (registry metadata `needs_critic=True`) takes token rewards and critic values
instead: `adv, returns, metrics = get_advantage("gae")(rewards, values, mask)`.
"""

from __future__ import annotations

import importlib
import pkgutil

import torch

from lmpo.advantages.base import ADVANTAGES, Estimator, check_scores, group_stats
from lmpo.advantages.ebpo import EBPO
from lmpo.advantages.gae import GAE, gae
from lmpo.advantages.otb import PathStats
from lmpo.welford import Welford

for _module in pkgutil.iter_modules(__path__):  # every estimator file registers itself
    importlib.import_module(f"{__name__}.{_module.name}")


def get_advantage(name: str, validate: bool = False, **hparams) -> Estimator:
    """A new estimator `name` with `hparams`; call it as `est(scores, group_ids)` (the
    critic family: `est(rewards, values, mask)`). `validate=True` checks every call's
    inputs first (`lmpo.advantages.checks`: float scores, groups of the estimator's
    `min_group`, a mask of 0 and 1, finite token rewards and values), one clear error each."""
    estimator = ADVANTAGES.get(name, **hparams)
    if not validate:
        return estimator
    from lmpo.advantages.checks import Validated

    meta = ADVANTAGES.meta(name)
    return Validated(estimator, meta["needs_critic"], meta["min_group"])


def list_advantages() -> list[str]:
    return ADVANTAGES.names()


def advantage_hparams(name: str) -> dict:
    return ADVANTAGES.hparams(name)


def advantage_meta(name: str) -> dict:
    """Registry metadata: `needs_critic` (the actor-critic family: GAE) and
    `wants_clusters` (the estimator uses the samples' clusters, e.g. EBPO's per-cluster
    prior). The trainer asks these, never the name."""
    return ADVANTAGES.meta(name)


def estimator_peer_hparams(name: str, peer: str, lookup) -> dict:
    """Hyper-parameters of estimator `name` from a peer engine's settings (registry metadata
    `peer_keys[peer]`: {hyper-parameter: peer key}), where `lookup(key)` is not None."""
    out = {}
    for hparam, key in advantage_meta(name).get("peer_keys", {}).get(peer, {}).items():
        value = lookup(key)
        if value is not None:
            out[hparam] = value
    return out


def group_estimators() -> list[str]:
    """The critic-free estimators of one score per sample:
    `est(scores [B], group_ids [B]) -> (adv [B], metrics)` (not those that want the
    policy's per-token path statistics, `wants_paths`, which return [B, T])."""
    return [n for n in list_advantages() if not advantage_meta(n)["needs_critic"]
            and not advantage_meta(n)["wants_paths"]]


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
    "EBPO", "GAE", "Estimator", "PathStats", "Welford", "advantage_hparams", "advantage_meta",
    "gae", "get_advantage", "group_estimators", "list_advantages", "nonzero_variance_groups",
]
