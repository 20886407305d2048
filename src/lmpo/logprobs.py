"""Per-token log-probabilities and entropy from logits, computed in row chunks.

The naive `log_softmax(logits.float())` materialises (and keeps for backward)
a full `[B, T, V]` float32 copy: at V = 150k and B*T = 4096 that is 2.4 GB
on top of the logits. Here the forward pass keeps only the per-row log-sum-exp
(`[B*T]`) and E_p[z], and the backward pass recomputes softmax one chunk at a
time, writing log-prob and entropy gradients together straight into one
gradient buffer for the logits. Arithmetic is float32 (or float64 for
float64 logits) whatever the logits' dtype, and whatever autocast surrounds the call (a
bfloat16 update's passes): autocast would run E_p[z]'s product in bfloat16, up to 0.25
nats of entropy error per token at a 49k vocabulary.
"""

from __future__ import annotations

import torch


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _rows_per_chunk(vocab: int, chunk_rows: int | None) -> int:
    """About 16M elements (64 MB in float32) per chunk unless given."""
    return chunk_rows if chunk_rows else max(1, (1 << 24) // max(vocab, 1))


class _LogProbEntropy(torch.autograd.Function):
    """Fused per-row log-prob of `ids` and entropy; saves only logits, lse, E_p[z]."""

    @staticmethod
    def forward(ctx, logits, ids, chunk):  # logits [N, V], ids [N]
        with torch.autocast(logits.device.type, enabled=False):
            return _LogProbEntropy._forward(ctx, logits, ids, chunk)

    @staticmethod
    def _forward(ctx, logits, ids, chunk):
        cd = _compute_dtype(logits.dtype)
        n = logits.shape[0]
        lse = torch.empty(n, dtype=cd, device=logits.device)
        ent = torch.empty(n, dtype=cd, device=logits.device)
        for s in _chunks(n, chunk):
            z = logits[s].to(cd)
            lse[s] = torch.logsumexp(z, dim=-1)
            logp = z - lse[s, None]  # a new tensor: `z` may be the logits themselves
            # H = -sum p log p over the log-probs, not lse - E_p[z]: with logits tens of
            # nats from 0 the difference of two large numbers loses float32 digits
            ent[s] = -torch.bmm(logp.exp()[:, None, :], logp[:, :, None]).reshape(-1)
        picked = logits.gather(1, ids[:, None]).squeeze(1).to(cd)
        mean_z = lse - ent  # E_p[z], what the backward pass needs
        ctx.save_for_backward(logits, ids, lse, mean_z)
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        ctx.chunk = chunk
        return picked - lse, ent

    @staticmethod
    def backward(ctx, grad_lp, grad_h):
        with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):
            return _LogProbEntropy._backward(ctx, grad_lp, grad_h)

    @staticmethod
    def _backward(ctx, grad_lp, grad_h):
        # d logp/dz_j = 1[j = id] - p_j ;  dH/dz_j = -p_j (z_j - E_p[z])
        logits, ids, lse, mean_z = ctx.saved_tensors
        grad = torch.empty_like(logits)
        cd = lse.dtype
        g_lp = torch.zeros_like(lse) if grad_lp is None else grad_lp.to(cd)
        g_h = None if grad_h is None else grad_h.to(cd)
        for s in _chunks(logits.shape[0], ctx.chunk):
            z = logits[s].to(cd)
            p = torch.exp(z - lse[s, None])
            if g_h is None:
                block = p.mul_(-g_lp[s, None])
            else:
                block = (z - mean_z[s, None]).mul_(g_h[s, None]).add_(g_lp[s, None]).mul_(p).neg_()
            block.scatter_add_(1, ids[s, None], g_lp[s, None])
            grad[s] = block
        return grad, None, None


def _flatten(logits: torch.Tensor):
    if logits.dim() < 2:
        raise ValueError(f"logits must be [..., V], got shape {tuple(logits.shape)}")
    return logits.reshape(-1, logits.shape[-1]), logits.shape[:-1]


def logprobs_and_entropy(logits: torch.Tensor, ids: torch.Tensor, *,
                         chunk_rows: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(log softmax(logits)[ids], entropy) at every position, in one pass.

    # [B, T, V], [B, T] -> [B, T], [B, T]
    """
    if ids.shape != logits.shape[:-1]:
        raise ValueError(
            f"ids shape {tuple(ids.shape)} must equal logits shape without the vocab "
            f"dimension {tuple(logits.shape[:-1])}"
        )
    flat, lead = _flatten(logits)
    chunk = _rows_per_chunk(flat.shape[1], chunk_rows)
    logp, ent = _LogProbEntropy.apply(flat, ids.reshape(-1).long(), chunk)
    return logp.reshape(lead), ent.reshape(lead)


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor, *, chunk_rows: int | None = None):
    """log softmax(logits)[ids] for every position.  # [B, T, V], [B, T] -> [B, T]"""
    return logprobs_and_entropy(logits, ids, chunk_rows=chunk_rows)[0]


def entropy(logits: torch.Tensor, *, chunk_rows: int | None = None) -> torch.Tensor:
    """Entropy of softmax(logits) at every position.  # [B, T, V] -> [B, T]"""
    ids = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)
    return logprobs_and_entropy(logits, ids, chunk_rows=chunk_rows)[1]


def sum_squared_probs(logits: torch.Tensor, *, chunk_rows: int | None = None) -> torch.Tensor:
    """sum_v softmax(logits)_v^2 at every position (no gradient), in row chunks, as
    exp(logsumexp(2z) - 2 logsumexp(z)) in float32 (float64 for float64 logits): the
    per-token term the optimal token baseline's path variance needs.
    # [B, T, V] -> [B, T]"""
    flat, lead = _flatten(logits)
    out = torch.empty(flat.shape[0], dtype=_compute_dtype(flat.dtype), device=flat.device)
    with torch.no_grad():
        for rows in _chunks(flat.shape[0], _rows_per_chunk(flat.shape[1], chunk_rows)):
            z = flat[rows].to(out.dtype)
            out[rows] = torch.exp(torch.logsumexp(2 * z, -1) - 2 * torch.logsumexp(z, -1))
    return out.reshape(lead)


def naive_token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Reference path (full float32 log-softmax copy); for tests and benchmarks."""
    logp = torch.log_softmax(logits.to(_compute_dtype(logits.dtype)), dim=-1)
    return logp.gather(-1, ids.long()[..., None]).squeeze(-1)


def naive_entropy(logits: torch.Tensor) -> torch.Tensor:
    return naive_logprobs_and_entropy(logits, torch.zeros_like(logits[..., 0], dtype=torch.long))[1]


def naive_logprobs_and_entropy(logits: torch.Tensor, ids: torch.Tensor):
    """Reference: one full float32 log-softmax, then gather and -sum(p log p)."""
    logp = torch.log_softmax(logits.to(_compute_dtype(logits.dtype)), dim=-1)
    return logp.gather(-1, ids.long()[..., None]).squeeze(-1), -(logp.exp() * logp).sum(-1)
