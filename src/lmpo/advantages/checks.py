"""The opt-in input check for library users of the estimators (`get_advantage(name,
validate=True)`), as `lmpo.losses.check_inputs` is for the losses: one ValueError naming
the input and the first offending index. The estimators already refuse wrong shapes and
non-finite scores; this adds what they take on trust: float scores, a mask of 0 and 1,
finite token rewards, values and bootstrap on valid tokens, groups at least as large as
the estimator's `min_group`. Off in the trainer, whose inputs come from its own passes."""

from __future__ import annotations

import torch


def _first(bad: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(x) for x in bad.nonzero()[0])


def check_group_inputs(scores, group_ids, min_group: int = 1) -> None:
    from lmpo.advantages.base import check_scores

    check_scores(scores, group_ids)
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating-point tensor, got {scores.dtype}")
    _, counts = torch.unique(group_ids, return_counts=True)
    if min_group > 1 and bool((counts < min_group).any()):
        small = int(counts.min())
        raise ValueError(f"every group needs >= {min_group} samples for this estimator; the "
                         f"smallest has {small}")


def check_critic_inputs(rewards, values, mask, bootstrap=None) -> None:
    for name, t in (("rewards", rewards), ("values", values), ("mask", mask)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a [B, T] tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t)}")
    if not rewards.shape == values.shape == mask.shape:
        raise ValueError(f"rewards, values and mask must share one [B, T] shape, got "
                         f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}")
    bad = ~((mask == 0) | (mask == 1))
    if bad.any():
        i = _first(bad)
        raise ValueError(f"mask must hold 0 and 1 only, got {float(mask[i])} at index {i}")
    for name, t in (("rewards", rewards), ("values", values)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
        wrong = mask.bool() & ~torch.isfinite(t)
        if wrong.any():
            i = _first(wrong)
            raise ValueError(f"{name} is not finite on a valid token: {float(t[i])} at index {i}")
    if bootstrap is not None:
        if bootstrap.shape != rewards[:, 0].shape:
            raise ValueError(f"bootstrap must be [B] = {tuple(rewards[:, 0].shape)}, got "
                             f"{tuple(bootstrap.shape)}")
        wrong = ~torch.isfinite(bootstrap)
        if wrong.any():
            i = _first(wrong)
            raise ValueError(f"bootstrap is not finite: {float(bootstrap[i])} at index {i}")


class Validated:
    """An estimator whose every call is checked first; everything else is the estimator's
    own (its state_dict, its hyper-parameters)."""

    def __init__(self, estimator, needs_critic: bool, min_group: int):
        self.estimator, self.needs_critic, self.min_group = estimator, needs_critic, min_group

    def __call__(self, *args, **kwargs):
        if self.needs_critic:
            check_critic_inputs(*args[:3], kwargs.get("bootstrap", args[3] if len(args) > 3
                                                      else None))
        else:
            check_group_inputs(args[0], args[1], self.min_group)
        return self.estimator(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.estimator, name)
