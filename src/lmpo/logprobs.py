"""Per-token log-probabilities and entropy from logits, computed in row chunks.

The naive `log_softmax(logits.float())` materialises (and keeps for backward)
a full `[B, T, V]` float32 copy: at V = 150k and B*T = 4096 that is 2.4 GB
on top of the logits. Here the forward pass keeps only the per-row log-sum-exp
(`[B*T]`), and the backward pass recomputes softmax one chunk at a time, writing
straight into the logits' gradient. Arithmetic is float32 (or float64 for
float64 logits) whatever the logits' dtype.
"""

from __future__ import annotations

import torch

CHUNK_ROWS = 512


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


class _TokenLogProb(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, ids, chunk):  # logits [N, V], ids [N]
        cd = _compute_dtype(logits.dtype)
        lse = torch.empty(logits.shape[0], dtype=cd, device=logits.device)
        picked = logits.gather(1, ids[:, None]).squeeze(1).to(cd)
        for s in _chunks(logits.shape[0], chunk):
            lse[s] = torch.logsumexp(logits[s].to(cd), dim=-1)
        ctx.save_for_backward(logits, ids, lse)
        ctx.chunk = chunk
        return picked - lse

    @staticmethod
    def backward(ctx, grad_out):  # d logp_i / d z_ij = 1[j = id_i] - softmax_ij
        logits, ids, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        cd = lse.dtype
        for s in _chunks(logits.shape[0], ctx.chunk):
            g = grad_out[s].to(cd)[:, None]
            block = -torch.exp(logits[s].to(cd) - lse[s, None]) * g
            block.scatter_add_(1, ids[s, None], g)
            grad[s] = block.to(grad.dtype)
        return grad, None, None


class _Entropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, chunk):  # logits [N, V]
        cd = _compute_dtype(logits.dtype)
        out = torch.empty(logits.shape[0], dtype=cd, device=logits.device)
        for s in _chunks(logits.shape[0], chunk):
            z = logits[s].to(cd)
            lse = torch.logsumexp(z, dim=-1, keepdim=True)
            p = torch.exp(z - lse)
            out[s] = lse.squeeze(-1) - (p * z).sum(-1)
        ctx.save_for_backward(logits)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):  # dH/dz_j = -p_j (z_j - E_p[z])
        (logits,) = ctx.saved_tensors
        grad = torch.empty_like(logits)
        cd = _compute_dtype(logits.dtype)
        for s in _chunks(logits.shape[0], ctx.chunk):
            z = logits[s].to(cd)
            p = torch.softmax(z, dim=-1)
            mean_z = (p * z).sum(-1, keepdim=True)
            grad[s] = (-p * (z - mean_z) * grad_out[s].to(cd)[:, None]).to(grad.dtype)
        return grad, None


def _flatten(logits: torch.Tensor):
    if logits.dim() < 2:
        raise ValueError(f"logits must be [..., V], got shape {tuple(logits.shape)}")
    return logits.reshape(-1, logits.shape[-1]), logits.shape[:-1]


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, *, chunk_rows: int = CHUNK_ROWS):
    """log softmax(logits)[ids] for every position.  # [B, T, V], [B, T] -> [B, T]"""
    if ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"ids shape {tuple(ids.shape)} must equal logits shape without the vocab "
            f"dimension {tuple(logits.shape[:-1])}"
        )
    flat, lead = _flatten(logits)
    out = _TokenLogProb.apply(flat, ids.reshape(-1).long(), chunk_rows)
    return out.reshape(lead)


def entropy(logits: torch.Tensor, *, chunk_rows: int = CHUNK_ROWS) -> torch.Tensor:
    """Entropy of softmax(logits) at every position.  # [B, T, V] -> [B, T]"""
    flat, lead = _flatten(logits)
    return _Entropy.apply(flat, chunk_rows).reshape(lead)


def naive_token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Reference path (full float32 log-softmax copy); for tests and benchmarks."""
    logp = torch.log_softmax(logits.to(_compute_dtype(logits.dtype)), dim=-1)
    return logp.gather(-1, ids.long()[..., None]).squeeze(-1)


def naive_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits.to(_compute_dtype(logits.dtype)), dim=-1)
    return -(logp.exp() * logp).sum(-1)
