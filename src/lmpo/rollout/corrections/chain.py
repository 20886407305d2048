"""Chained rollout corrections (`rollout.correction: [{kind, hparams}, ...]`): several
kinds applied to one batch, as verl combines an IS weight (`rollout_is`) with one or more
rejection criteria (`rollout_rs: "token_k1,seq_mean_k3"`) in
`compute_rollout_correction_and_rejection_mask`.

Every link reads the same log-ratio and the same response mask (verl computes each
criterion on the original `response_mask`); the update's mask is the product of the
links' masks, and the loss weights are those of the one link that gives weights (at most
one may). Metrics: the chain's own (`rollout_corr/masked_frac`, ... over the combined
mask and weights) and each link's share of tokens removed,
`rollout_corr/<kind>/masked_frac`."""

from __future__ import annotations

import torch

from lmpo.errors import ConfigError
from lmpo.rollout.corrections.base import Correction, finish, get_correction


def gives_weights(fn) -> bool:
    """Whether the built correction `fn` returns weights (an IS kind) rather than only a
    mask (a rejection kind)."""
    return fn(torch.zeros(1, 1), torch.ones(1, 1)).weights is not None


class Chain:
    """`fn(log_ratio, mask) -> Correction` for the links `[(kind, hparams), ...]`."""

    def __init__(self, links: list[tuple[str, dict]]):
        kinds = [kind for kind, _ in links]
        if len(links) < 2:
            raise ConfigError("a chain of rollout corrections needs at least two kinds")
        repeated = sorted({k for k in kinds if kinds.count(k) > 1})
        if repeated:
            raise ConfigError(f"rollout.correction lists {', '.join(repeated)} more than once; "
                              "give each kind once, with all its thresholds")
        self.kinds = kinds
        self.fns = [get_correction(kind, **hparams) for kind, hparams in links]
        weighted = [k for k, fn in zip(kinds, self.fns, strict=True) if gives_weights(fn)]
        if len(weighted) > 1:
            raise ConfigError(f"rollout.correction chains {' and '.join(weighted)}, which both "
                              "give importance weights; a chain takes at most one (the others "
                              "must be rejection kinds: rs_<mode>, m2po)")

    def __call__(self, log_ratio, mask) -> Correction:
        weights, combined, metrics = None, mask, {}
        for kind, fn in zip(self.kinds, self.fns, strict=True):
            got = fn(log_ratio, mask)
            combined = combined * got.mask
            if got.weights is not None:
                weights = got.weights
            metrics[f"rollout_corr/{kind}/masked_frac"] = got.metrics["rollout_corr/masked_frac"]
        return Correction(weights, combined, metrics | finish(weights, mask, combined).metrics)


def build_correction(links: list[tuple[str, dict]]):
    """The correction `links` ask for: None for none, the kind itself for one (the rows of
    a single kind do not change), a `Chain` for more; each called once on a 1 x 1 probe,
    so that a setting its function refuses fails here, before any work."""
    if not links:
        return None
    if len(links) == 1:
        kind, hparams = links[0]
        fn = get_correction(kind, **hparams)
        gives_weights(fn)
        return fn
    return Chain(links)
