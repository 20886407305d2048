"""KL estimators to a frozen reference policy (per token)."""

from __future__ import annotations

import torch

from lmpo.choices import KL_KINDS


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi.  # [B, T] -> [B, T]

    k1 = logp - ref_logp; k2 = (logp - ref_logp)^2 / 2;
    k3 = exp(ref_logp - logp) - (ref_logp - logp) - 1, with the log-ratio clamped to
    [-20, 20] and the result to [-10, 10] (as verl's low_var_kl); abs = |logp - ref_logp|.
    A kind ending in `+` (verl's straight-through `k1+`, `low_var_kl+`, `abs+`) has that
    kind's value and k2's gradient, (logp - ref_logp): k1 and k3 estimate the KL without
    bias but not its gradient, which k2 does.
    """
    if logp.shape != ref_logp.shape:
        raise ValueError(
            f"ref_logp shape {tuple(ref_logp.shape)} does not match logp shape {tuple(logp.shape)}"
        )
    ref_logp = ref_logp.detach()
    if kind.endswith("+") and kind in KL_KINDS:
        value = kl_penalty(logp, ref_logp, kind[:-1])
        grad = 0.5 * (logp - ref_logp).square()
        return grad - grad.detach() + value.detach()
    if kind == "abs":
        return (logp - ref_logp).abs()
    if kind == "k1":
        return logp - ref_logp
    if kind == "k2":
        return 0.5 * (logp - ref_logp).square()
    if kind == "k3":
        log_ratio = (ref_logp - logp).clamp(-20, 20)
        return (torch.exp(log_ratio) - log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"unknown KL kind {kind!r}; valid kinds: {', '.join(KL_KINDS)}")
