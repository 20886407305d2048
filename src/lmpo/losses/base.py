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
OR_MARGIN = 0.2  # Output Reset's default margin: where every ratio loss reports or/* diagnostics


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

    def shares(self, name: str, x: torch.Tensor) -> dict[str, float]:
        """A mechanism's share of tokens two ways: `name` over every valid response token
        (as the engines log it: verl's pg_clipfrac counts A = 0 tokens too) and
        `name_active` over the tokens with A != 0, the ones any update can move (what
        reports tabulate as the method's own diagnostic, docs/reproductions.md)."""
        x = x.to(torch.float64) if x.dtype == torch.bool else x
        return {name: self.mean(x), f"{name}_active": self.mean(x, self.adv != 0)}


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


def check_inputs(logp, old_logp, adv, mask) -> None:
    """The opt-in check for library users (`get_loss(name, validate=True)`): on top of the
    shapes every loss checks (`prepare`), one ValueError naming the input and the first
    offending index for a non-finite log-prob or advantage on a valid token (a -inf
    old log-prob gives a loss of 1e5-1e6, a NaN advantage a finite loss), a mask value
    outside {0, 1}, and log-probs and advantages that are not floating point. Off in the
    trainer's hot path: the trainer's inputs come from its own passes."""
    prepare(logp, old_logp, adv, mask)  # types and shapes, with their own messages
    bad = ~((mask == 0) | (mask == 1))
    if bad.any():
        i = tuple(int(x) for x in bad.nonzero()[0])
        raise ValueError(f"mask must hold 0 and 1 only, got {float(mask[i])} at index {i}")
    for name, t in (("logp", logp), ("old_logp", old_logp), ("adv", adv)):
        if not t.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got {t.dtype}")
    valid = mask.bool()
    adv_full = adv[:, None].expand_as(logp) if adv.dim() == 1 else adv
    for name, t in (("logp", logp), ("old_logp", old_logp), ("adv", adv_full)):
        wrong = valid & ~torch.isfinite(t.detach())
        if wrong.any():
            i = tuple(int(x) for x in wrong.nonzero()[0])
            raise ValueError(f"{name} is not finite on a valid token: {float(t[i])} at index "
                             f"{i}" + (" (index [b] of adv [B])" if name == "adv"
                                       and adv.dim() == 1 else ""))


def displacement_metrics(rho: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                         alpha: float = OR_MARGIN) -> dict[str, float]:
    """Where an update has moved the sampled tokens, comparable across every ratio loss.

    displacement: mean |rho| over valid tokens; displacement_seq: the sum of |rho| over a
    sequence, averaged over sequences with a valid token; or/residual: mean of Output
    Reset's max(0, alpha - sign(A) rho)^2 over valid tokens with A != 0; or/overshoot_frac:
    the share of those tokens with sign(A) rho >= alpha (moved past the margin).
    rho, adv, mask: [B, T] (adv may be [B]); all values 0 on an empty mask.
    """
    rho = rho.detach().to(torch.float64)
    valid = mask.bool()
    adv = adv.detach().to(torch.float64)
    adv = adv[:, None].expand_as(rho) if adv.dim() == 1 else adv
    rho = torch.where(valid, rho, torch.zeros_like(rho))
    seq_sum = rho.abs().sum(-1)
    has_tok = valid.any(-1)
    active = valid & (adv != 0)
    margin = torch.sign(adv) * rho
    return {
        "displacement": float(masked_mean(rho.abs(), valid)),
        "displacement_seq": float(seq_sum[has_tok].mean()) if bool(has_tok.any()) else 0.0,
        "or/residual": float(masked_mean(torch.relu(alpha - margin).square(), active)),
        "or/overshoot_frac": float(masked_mean((margin >= alpha).to(rho.dtype), active)),
    }


def ratio_metrics(x: LossInputs) -> dict[str, float]:
    """Metrics every ratio loss reports: `displacement_metrics` at OR's default margin, and

    approx_kl: k3 estimate of KL(behaviour || current) = mean(r - 1 - rho).
    """
    rho = x.rho.detach()
    ratio = x.ratio.detach()
    any_valid = bool(x.mask.any())
    return displacement_metrics(rho, x.adv, x.mask) | {
        "approx_kl": x.mean(ratio - 1 - rho),
        "ratio_mean": x.mean(ratio),
        "ratio_max": float(ratio[x.mask].max()) if any_valid else 0.0,
    }
