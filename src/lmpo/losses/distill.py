"""On-policy distillation's per-token divergences between the student q (the policy, with
gradient) and a teacher p (no gradient), each from the engine that ships it or proposes it:

- `reverse_kl_topk`: sum_{i in topk(q)} q_i (log q_i - log p_i), unnormalised (verl
  #7590 / #7806);
- `forward_kl_topk`: sum_{i in topk(p)} p_i (log p_i - log q_i), clamped at 0 (verl 0.9.1's
  `forward_kl_topk`);
- `forward_kl_topk_tail`: the same plus the tail bucket p_t log(p_t / q_t), no clamp (verl
  RFC #7856 / PR #7855);
- `forward_kl`: sum_v p_v (log p_v - log q_v) over the whole vocabulary, chunked over it
  (verl RFC #7239);
- `jsd`: beta KL(p || m) + (1 - beta) KL(q || m), m = (1 - beta) q + beta p (TRL's
  `DistillationTrainer`).

The top-k forms read what an engine's teacher server returns (its top k ids and log-probs,
`teacher_topk`) or, for the student's top k, the teacher's log-probs gathered at the
student's ids (the student's ids carry no gradient). With a truncated support
`forward_kl_topk` is not a KL (negative when the student holds more of the teacher's top k
than the teacher), hence verl's clamp; the tail bucket makes it the exact KL between the
two (k + 1)-category distributions, non-negative by construction. `jsd` is TRL's
generalised JSD: beta 0 is the forward KL(p || q), beta 1 the reverse KL(q || p).

`forward_kl` never materialises a [N, V] intermediate: the forward pass runs over
vocabulary chunks keeping the student's per-row log-sum-exp, and the backward pass
recomputes softmax(z) - p one chunk at a time (d/dz_v = q_v sum(p) - p_v).
"""

from __future__ import annotations

import math

import torch

DIVERGENCES = ("reverse_kl_topk", "forward_kl_topk", "forward_kl_topk_tail", "forward_kl",
               "jsd")


def _up(x: torch.Tensor) -> torch.Tensor:
    """float32, or float64 for float64 input: the arithmetic of every divergence here."""
    return x if x.dtype == torch.float64 else x.float()


def kl_terms(la: torch.Tensor, lb: torch.Tensor) -> torch.Tensor:
    """sum_i a_i (log a_i - log b_i) over the last axis, a = exp(la); an entry with a_i = 0
    contributes 0 (whatever log b_i is)."""
    a = la.exp()
    return torch.where(a > 0, a * (la - lb), torch.zeros_like(a)).sum(-1)


def teacher_topk(teacher_logp: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [..., k], log-probs [..., k]) of the teacher's top k: a teacher server's
    `prompt_logprobs=k` payload."""
    top = teacher_logp.detach().topk(min(k, teacher_logp.shape[-1]), dim=-1)
    return top.indices, top.values


def reverse_kl_topk(student_logp: torch.Tensor, teacher_logp: torch.Tensor, k: int):
    """(sum_{i in topk(q)} q_i (log q_i - log p_i) [...], the student's and the teacher's
    mass on that support [...]) from full log-probs [..., V]."""
    ids = student_logp.detach().topk(min(k, student_logp.shape[-1]), dim=-1).indices
    lq = _up(student_logp.gather(-1, ids))
    lp = _up(teacher_logp.detach().gather(-1, ids))
    return kl_terms(lq, lp), lq.detach().exp().sum(-1), lp.exp().sum(-1)


def forward_kl_topk(student_logp: torch.Tensor, top_ids: torch.Tensor, top_logp: torch.Tensor,
                    log_prob_min_clamp: float | None = None):
    """(verl 0.9.1's forward_kl_topk: sum_{i in T} p_i (log p_i - log q_i), clamped at 0,
    the student's mass on T, the teacher's) from the student's log-probs [..., V] and the
    teacher's top k (`teacher_topk`); `log_prob_min_clamp` floors both sides' log-probs
    as verl's option does."""
    lq = _up(student_logp.gather(-1, top_ids))
    lp = _up(top_logp.detach())
    q_mass, p_mass = lq.detach().exp().sum(-1), lp.exp().sum(-1)
    if log_prob_min_clamp is not None:
        lq, lp = lq.clamp_min(log_prob_min_clamp), lp.clamp_min(log_prob_min_clamp)
    return kl_terms(lp, lq).clamp_min(0.0), q_mass, p_mass


def forward_kl_topk_tail(student_logp: torch.Tensor, top_ids: torch.Tensor,
                         top_logp: torch.Tensor, tail_mass_eps: float = 1e-6):
    """(sum_{i in T} p_i log(p_i / q_i) + p_t log(p_t / q_t) [...], q's mass on T, p's):
    the KL between the (k + 1)-category coarse-grainings, p_t = 1 - P and q_t = 1 - Q the
    mass outside the teacher's top k. `tail_mass_eps` floors q_t inside its logarithm
    only; p_t = 0 contributes 0 (x log x -> 0), as PR #7855."""
    lq = _up(student_logp.gather(-1, top_ids))
    lp = _up(top_logp.detach())
    q_mass, p_mass = lq.exp().sum(-1), lp.exp().sum(-1)
    p_tail = (1.0 - p_mass).clamp(0.0, 1.0)
    q_tail = (1.0 - q_mass).clamp(tail_mass_eps, 1.0)
    tail = torch.xlogy(p_tail, p_tail) - p_tail * torch.log(q_tail)
    return kl_terms(lp, lq) + tail, q_mass.detach(), p_mass


def jsd(student_logp: torch.Tensor, teacher_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """TRL's generalised JSD per token from full log-probs [..., V]: beta 0 the forward
    KL(p || q), beta 1 the reverse KL(q || p), else beta KL(p || m) + (1 - beta) KL(q || m)
    with m = (1 - beta) q + beta p."""
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"jsd's beta must be in [0, 1], got {beta}")
    lq, lp = _up(student_logp), _up(teacher_logp.detach())
    if beta == 0.0:
        return kl_terms(lp, lq)
    if beta == 1.0:
        return kl_terms(lq, lp)
    lm = torch.logaddexp(lq + math.log(1.0 - beta), lp + math.log(beta))
    return beta * kl_terms(lp, lm) + (1.0 - beta) * kl_terms(lq, lm)


def _column_chunks(v: int, size: int):
    for start in range(0, v, size):
        yield slice(start, min(start + size, v))


class _ForwardKL(torch.autograd.Function):
    """sum_v p_v (log p_v - log softmax(z)_v) per row over vocabulary chunks; saves the
    inputs and the student's log-sum-exp only."""

    @staticmethod
    def forward(ctx, logits, teacher_logp, chunk):  # [N, V], [N, V]
        cd = torch.float64 if logits.dtype == torch.float64 else torch.float32
        n, v = logits.shape
        parts = [torch.logsumexp(logits[:, c].to(cd), dim=-1) for c in _column_chunks(v, chunk)]
        lse = torch.logsumexp(torch.stack(parts), dim=0)
        kl = torch.zeros(n, dtype=cd, device=logits.device)
        p_sum = torch.zeros(n, dtype=cd, device=logits.device)
        for c in _column_chunks(v, chunk):
            lp = teacher_logp[:, c].to(cd)
            kl += kl_terms(lp, logits[:, c].to(cd) - lse[:, None])
            p_sum += lp.exp().sum(-1)
        ctx.save_for_backward(logits, teacher_logp, lse, p_sum)
        ctx.chunk = chunk
        return kl

    @staticmethod
    def backward(ctx, grad):
        logits, teacher_logp, lse, p_sum = ctx.saved_tensors
        out = torch.empty_like(logits)
        g = grad.to(lse.dtype)[:, None]
        for c in _column_chunks(logits.shape[1], ctx.chunk):
            q = torch.exp(logits[:, c].to(lse.dtype) - lse[:, None])
            out[:, c] = (g * (q * p_sum[:, None] - teacher_logp[:, c].to(lse.dtype).exp())
                         ).to(logits.dtype)
        return out, None, None


def forward_kl(student_logits: torch.Tensor, teacher_logp: torch.Tensor,
               chunk: int = 8192) -> torch.Tensor:
    """The full-vocabulary forward KL(p || q) per token [...] from the student's logits
    [..., V] (temperature-scaled) and the teacher's log-probs [..., V], `chunk` vocabulary
    entries at a time, float32 (float64 for float64 logits) whatever autocast surrounds it."""
    if student_logits.shape != teacher_logp.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher log-probs "
                         f"{tuple(teacher_logp.shape)} must have one shape")
    lead, v = student_logits.shape[:-1], student_logits.shape[-1]
    with torch.autocast(student_logits.device.type, enabled=False):
        kl = _ForwardKL.apply(student_logits.reshape(-1, v), teacher_logp.detach().reshape(-1, v),
                              chunk)
    return kl.reshape(lead)
