"""Masked reductions over `[B, T]` tensors and the one place losses become scalars.

`mask` is float or bool, 1 for a real response token. Reductions over an empty
mask return 0, never NaN.
"""

from __future__ import annotations

import torch

AGG_MODES = (  # the modes verl's agg_loss shares
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
PROMPT_MEAN = "prompt-mean"  # SkyRL's loss_reduction prompt_mean (ScaleRL): needs group ids
ALL_AGG_MODES = (*AGG_MODES, PROMPT_MEAN)


def position_ids(mask: torch.Tensor) -> torch.Tensor:
    """Positions of left-padded rows: 0 at each row's first real token.  # [B, L] -> [B, L]"""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    x = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim=None) -> torch.Tensor:
    """Mean of `x` over `mask`; 0 where the mask is empty."""
    count = mask.to(x.dtype).sum() if dim is None else mask.to(x.dtype).sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of `x` (all of them pooled)."""
    mean = masked_mean(x, mask)
    n = mask.to(x.dtype).sum()
    ss = masked_sum((x - mean) ** 2, mask)
    denom = (n - 1) if unbiased else n
    return ss / denom.clamp(min=1)


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True,
                  eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / std over the masked entries (unbiased var, as verl); 0 off-mask."""
    mean = masked_mean(x, mask)
    out = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(mask.bool(), out, torch.zeros((), dtype=x.dtype, device=x.device))


def prompt_weights(mask: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """[B] each row's weight under prompt-mean: 1 / (P n_g), n_g the tokens of its prompt's
    rows, P the prompts with a token (0 for the rows of a prompt with none)."""
    tokens = mask.to(torch.float64).sum(-1)
    _, group = torch.unique(group_ids, return_inverse=True)
    per_group = torch.zeros(int(group.max()) + 1 if len(group) else 0,
                            dtype=torch.float64).index_add_(0, group, tokens)
    prompts = (per_group > 0).sum().clamp(min=1)
    n = per_group[group]
    return torch.where(n > 0, 1.0 / (prompts * n.clamp(min=1)), torch.zeros_like(n))


def aggregate(loss_tok: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", *,
              num_tokens=None, num_seqs=None, horizon=None, group_ids=None,
              row_weights=None) -> torch.Tensor:
    """Reduce a per-token loss `[B, T]` to a scalar.

    | mode                      | value                                        |
    | token-mean                | sum(L*m) / num_tokens           (DAPO)       |
    | token-sum                 | sum(L*m)                                     |
    | seq-mean-token-mean       | sum_rows(sum_t L*m / sum_t m) / num_seqs (GRPO) |
    | seq-mean-token-sum        | sum(L*m) / num_seqs                          |
    | seq-mean-token-sum-norm   | sum(L*m) / (num_seqs * horizon) (Dr. GRPO)   |
    | prompt-mean               | mean over prompts of each prompt's token mean |

    Defaults as verl's `agg_loss`: num_tokens = sum(m), num_seqs = rows with at
    least one token, horizon = T. Pass the *global* counts of the whole batch
    when accumulating gradients over micro-batches so that the sum of the
    micro-batch losses equals the full-batch loss. A zero denominator gives 0.
    prompt-mean (SkyRL's `loss_reduction: prompt_mean`) needs each row's prompt,
    `group_ids` [B], or, across micro-batches, the rows' `row_weights` [B] computed over
    the whole batch (`prompt_weights`).
    """
    if loss_tok.dim() != 2 or loss_tok.shape != mask.shape:
        raise ValueError(
            f"aggregate expects loss_tok and mask of equal [B, T] shape, got "
            f"{tuple(loss_tok.shape)} and {tuple(mask.shape)}"
        )
    if mode not in ALL_AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; valid modes: "
                         f"{', '.join(ALL_AGG_MODES)}")
    m = mask.to(loss_tok.dtype)
    row_sum = masked_sum(loss_tok, mask, dim=-1)  # [B]
    if mode == PROMPT_MEAN:
        if row_weights is None:
            if group_ids is None:
                raise ValueError("aggregation prompt-mean needs the rows' prompts (group_ids) "
                                 "or their weights (row_weights)")
            row_weights = prompt_weights(mask, group_ids)
        return (row_sum * row_weights.to(loss_tok.dtype)).sum()
    tokens_per_row = m.sum(-1)  # [B]
    if num_seqs is None:
        num_seqs = (tokens_per_row > 0).to(loss_tok.dtype).sum()
    num_seqs = torch.as_tensor(num_seqs, dtype=loss_tok.dtype).clamp(min=1)
    if mode == "token-mean":
        if num_tokens is None:
            num_tokens = m.sum()
        return row_sum.sum() / torch.as_tensor(num_tokens, dtype=loss_tok.dtype).clamp(min=1)
    if mode == "token-sum":
        return row_sum.sum()
    if mode == "seq-mean-token-mean":
        return (row_sum / tokens_per_row.clamp(min=1)).sum() / num_seqs
    total = row_sum.sum() / num_seqs
    if mode == "seq-mean-token-sum-norm":
        total = total / (loss_tok.shape[-1] if horizon is None else horizon)
    return total
