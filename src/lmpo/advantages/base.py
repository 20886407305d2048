"""Input checks and per-group statistics shared by the group estimators."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lmpo.registry import DEFAULT_ESTIMATOR, Registry  # noqa: F401 (re-exported)

ADVANTAGES = Registry("advantage estimator", defaults={
    "needs_critic": False, "wants_clusters": False, "wants_lengths": False,
    "wants_parts": False, "wants_baselines": False, "wants_paths": False,
    "peer_keys": {}, "peer_names": {}, "twin": None, "readings": (),
    "diagnostics": (), "engagement": None,
    # what a change to this estimator changes by design (as for losses and controllers:
    # none unless the estimator declares it; a claim declares its own in `expects:`)
    "mediates": (),
    "preset_keys": (), "title": "", "source": "", "summary": "",
    # the conventions the group-estimator property tests hold each estimator to:
    # `singleton` "zero" (a group of one gets A = 0: its score cannot matter) or "score"
    # (its advantage depends on its own score: no group baseline, a greedy baseline, a
    # prior, a leave-one-out with nothing left out); `min_group`: the smallest group it
    # accepts; `constant_groups`: what all-equal groups get, "zero" (each such group
    # A = 0), "batch" (A = 0 only when the whole batch is equal: no group baseline,
    # batch whitening), "prior" (shrunk toward a running prior: non-zero) or "none" (every
    # sample keeps its score: no baseline at all); `whitens`: the advantages are whitened
    # over the batch's tokens with an epsilon in the variance (REINFORCE++), so advantages
    # that would be 0 are ~1e-8 / std instead
    "singleton": "zero", "min_group": 1, "constant_groups": "zero", "whitens": False})


def check_scores(scores: torch.Tensor, group_ids: torch.Tensor) -> None:
    """Raise a clear error for wrong shapes or non-finite scores (naming the indices)."""
    if not isinstance(scores, torch.Tensor) or scores.dim() != 1:
        shape = tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
        raise ValueError(f"scores must be a 1-D tensor [B], got {shape}")
    if not isinstance(group_ids, torch.Tensor) or group_ids.shape != scores.shape:
        shape = tuple(group_ids.shape) if isinstance(group_ids, torch.Tensor) else group_ids
        raise ValueError(f"group_ids shape {shape} must equal scores shape {tuple(scores.shape)}")
    if group_ids.is_floating_point() or group_ids.is_complex():
        raise ValueError(f"group_ids must be integers, got dtype {group_ids.dtype}")
    bad = (~torch.isfinite(scores)).nonzero().flatten().tolist()
    if bad:
        shown = ", ".join(f"{i} ({float(scores[i])})" for i in bad[:10])
        more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
        raise ValueError(f"non-finite scores at indices {shown}{more}")


@dataclass
class Groups:
    """Per-group statistics of `scores` (float64) and the map sample -> group."""

    index: torch.Tensor  # [B] group position of each sample
    size: torch.Tensor  # [Q] responses per group
    mean: torch.Tensor  # [Q]
    std: torch.Tensor  # [Q] unbiased (ddof=1); 0 for a group of one
    scores: torch.Tensor  # [B] float64
    lengths: torch.Tensor | None = None  # [B] float64 response tokens (wants_lengths)
    parts: torch.Tensor | None = None  # [B, K] float64 per-reward-function scores (wants_parts)
    weights: torch.Tensor | None = None  # [K] float64 those functions' weights (wants_parts)
    baselines: torch.Tensor | None = None  # [B] float64 greedy-response scores (wants_baselines)
    paths: object | None = None  # lmpo.advantages.otb.PathStats, [B, T] each (wants_paths)

    @property
    def zero_std_frac(self) -> float:
        return float((self.std == 0).to(torch.float64).mean()) if len(self.std) else 0.0


def group_stats(scores: torch.Tensor, group_ids: torch.Tensor) -> Groups:
    s = scores.detach().to(torch.float64)
    _, index, size = torch.unique(group_ids, return_inverse=True, return_counts=True)
    n = size.to(torch.float64)
    mean = torch.zeros(len(size), dtype=torch.float64).index_add_(0, index, s) / n
    sq = torch.zeros(len(size), dtype=torch.float64).index_add_(0, index, (s - mean[index]) ** 2)
    std = torch.where(size > 1, torch.sqrt(sq / (n - 1).clamp(min=1)), torch.zeros_like(sq))
    return Groups(index, size, mean, std, s)


def batch_std(x: torch.Tensor) -> torch.Tensor:
    """Unbiased std of a 1-D tensor; 0 when it has fewer than two entries."""
    return x.std(unbiased=True) if x.numel() > 1 else torch.zeros((), dtype=x.dtype)


GROUP_TYPES = ("allfail", "allsuccess", "mixed")


def group_types(adv: torch.Tensor, groups: Groups) -> dict[str, float]:
    """Per group type, the share of groups and the mean advantage of their samples:
    all-fail (every score <= 0: 0 on {0, 1} rewards, -1 on {-1, +1}), all-success (every
    score >= 1) and mixed (the rest). `adv/<type>_mean` is 0 where no group is of that
    type (its `_frac` is then 0)."""
    q = len(groups.size)
    high = torch.full((q,), -math.inf, dtype=torch.float64).scatter_reduce(
        0, groups.index, groups.scores, "amax")
    low = torch.full((q,), math.inf, dtype=torch.float64).scatter_reduce(
        0, groups.index, groups.scores, "amin")
    kinds = {"allfail": high <= 0, "allsuccess": low >= 1}
    kinds["mixed"] = ~(kinds["allfail"] | kinds["allsuccess"])
    out = {}
    for name, of_group in kinds.items():
        of_sample = of_group[groups.index]
        out[f"adv/{name}_frac"] = float(of_group.to(torch.float64).mean()) if q else 0.0
        out[f"adv/{name}_mean"] = float(adv[of_sample].mean()) if bool(of_sample.any()) else 0.0
    return out


def summary(adv: torch.Tensor, groups: Groups,
            clusters: list[str] | None = None) -> dict[str, float]:
    """Advantage statistics; `adv/zero_frac` (share of samples with A == 0) also per
    cluster as `adv/zero_frac/<cluster>` when `clusters` (one name per sample) is given."""
    a = adv.to(torch.float64)
    zero = (a == 0).to(torch.float64)
    out = {
        "adv/mean": float(a.mean()) if a.numel() else 0.0,
        "adv/std": float(batch_std(a)),
        "adv/abs_max": float(a.abs().max()) if a.numel() else 0.0,
        "adv/zero_frac": float(zero.mean()) if a.numel() else 0.0,
        "adv/zero_std_frac": groups.zero_std_frac,
    }
    out |= group_types(a, groups)
    if clusters is not None:
        if len(clusters) != len(a):
            raise ValueError(f"clusters has {len(clusters)} entries for {len(a)} scores")
        for c in dict.fromkeys(clusters):
            sel = torch.tensor([x == c for x in clusters])
            out[f"adv/zero_frac/{c}"] = float(zero[sel].mean())
    return out


class Estimator:
    """A stateless estimator:
    `est(scores [B], group_ids [B], *, clusters=None) -> (adv [B], metrics)`.

    `clusters` (one name per sample) only adds per-cluster metrics here; estimators
    registered with `wants_clusters=True` (EBPO) may also use it. Estimators registered
    with `wants_lengths=True` (OPO, REINFORCE++'s token whitening) get `lengths` [B], each
    response's token count; with `wants_parts=True` (GDPO) `parts` [B, K], each reward
    function's score (NaN where one gave none), and `weights` [K]; with
    `wants_baselines=True` (ReMax) `baselines` [B], the score of each prompt's greedy
    response; with `wants_paths=True` (OTB) `paths`, the sampling policy's per-token
    statistics (`lmpo.advantages.otb.PathStats`), and those return [B, T] advantages (their
    metrics summarise each row's token mean). Callers pass these only to the estimators
    that want them."""

    def __call__(self, scores: torch.Tensor, group_ids: torch.Tensor, *,
                 clusters: list[str] | None = None, lengths: torch.Tensor | None = None,
                 parts: torch.Tensor | None = None, weights: torch.Tensor | None = None,
                 baselines: torch.Tensor | None = None, paths=None):
        check_scores(scores, group_ids)
        groups = group_stats(scores, group_ids)
        for name, x in (("lengths", lengths), ("baselines", baselines)):
            if x is not None:
                if x.shape != scores.shape:
                    raise ValueError(f"{name} shape {tuple(x.shape)} must equal scores shape "
                                     f"{tuple(scores.shape)}")
                setattr(groups, name, x.detach().to(torch.float64))
        if parts is not None:
            k = parts.shape[-1] if parts.dim() == 2 else -1
            if parts.dim() != 2 or parts.shape[0] != len(scores):
                raise ValueError(f"parts shape {tuple(parts.shape)} must be [B, K] with B = "
                                 f"{len(scores)}")
            w = torch.ones(k) if weights is None else torch.as_tensor(weights)
            if w.shape != (k,):
                raise ValueError(f"weights shape {tuple(w.shape)} must be ({k},), one per part")
            groups.parts, groups.weights = parts.detach().to(torch.float64), w.to(torch.float64)
        if paths is not None:
            paths.check(len(scores))
            groups.paths = paths
        adv = self.compute(groups)
        rows = adv if adv.dim() == 1 else \
            (adv * groups.paths.mask).sum(-1) / groups.paths.mask.sum(-1).clamp(min=1)
        return adv.to(scores.dtype if scores.is_floating_point() else torch.float32), summary(
            rows, groups, clusters
        )

    def compute(self, groups: Groups) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        if state:
            raise ValueError(f"{type(self).__name__} is stateless; got state keys {sorted(state)}")
