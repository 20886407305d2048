"""Shared input checks and quantities for every policy loss.

Every loss is a pure function
`fn(logp, old_logp, adv, mask, *, <hyper-parameters>) -> (loss_tok [B,T], metrics)`.
`prepare` validates shapes, broadcasts `adv`, zeroes whatever sits at padded
positions (so garbage or -inf there can never leak into values or gradients)
and computes the clamped log-ratio every ratio loss uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lmpo.masked import masked_mean

RHO_CLAMP = 20.0  # |log-ratio| clamp before exp, as verl


@dataclass
class LossInputs:
    logp: torch.Tensor  # [B, T] current policy, differentiable, 0 off-mask
    old_logp: torch.Tensor  # [B, T] behaviour policy, detached, 0 off-mask
    adv: torch.Tensor  # [B, T] detached, 0 off-mask
    mask: torch.Tensor  # [B, T] bool
    rho: torch.Tensor  # [B, T] clamp(logp - old_logp, -20, 20)
    ratio: torch.Tensor  # [B, T] exp(rho)

    def zero_off_mask(self, loss_tok: torch.Tensor) -> torch.Tensor:
        return torch.where(self.mask, loss_tok, torch.zeros_like(loss_tok))

    def mean(self, x: torch.Tensor, where: torch.Tensor | None = None) -> float:
        """Mean of `x` over valid tokens (and `where`, if given) as a float; 0 if empty."""
        sel = self.mask if where is None else self.mask & where
        return float(masked_mean(x.detach().to(torch.float64), sel))


def _shape(t) -> tuple:
    return tuple(t.shape)


def prepare(logp, old_logp, adv, mask) -> LossInputs:
    """Validate and normalise the four loss inputs (see module docstring)."""
    for name, t in (("logp", logp), ("old_logp", old_logp), ("adv", adv), ("mask", mask)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if logp.dim() != 2:
        raise ValueError(f"logp must be [B, T], got shape {_shape(logp)}")
    if old_logp.shape != logp.shape:
        raise ValueError(
            f"old_logp shape {_shape(old_logp)} does not match logp shape {_shape(logp)}"
        )
    if mask.shape != logp.shape:
        raise ValueError(f"mask shape {_shape(mask)} does not match logp shape {_shape(logp)}")
    if adv.dim() == 1 and adv.shape[0] == logp.shape[0]:
        adv = adv[:, None].expand_as(logp)
    elif adv.shape != logp.shape:
        raise ValueError(
            f"adv shape {_shape(adv)} must be [B] or [B, T] matching logp shape {_shape(logp)}"
        )
    valid = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    logp = torch.where(valid, logp, zero)
    old_logp = torch.where(valid, old_logp.detach().to(logp.dtype), zero)
    adv = torch.where(valid, adv.detach().to(logp.dtype), zero)
    rho = (logp - old_logp).clamp(-RHO_CLAMP, RHO_CLAMP)
    return LossInputs(logp, old_logp, adv, valid, rho, torch.exp(rho))


def ratio_metrics(x: LossInputs) -> dict[str, float]:
    """Metrics every ratio loss reports.

    displacement: mean |rho| over valid tokens (rollout-to-current displacement).
    approx_kl: k3 estimate of KL(behaviour || current) = mean(r - 1 - rho).
    """
    rho = x.rho.detach()
    ratio = x.ratio.detach()
    any_valid = bool(x.mask.any())
    return {
        "displacement": x.mean(rho.abs()),
        "approx_kl": x.mean(ratio - 1 - rho),
        "ratio_mean": x.mean(ratio),
        "ratio_max": float(ratio[x.mask].max()) if any_valid else 0.0,
    }
