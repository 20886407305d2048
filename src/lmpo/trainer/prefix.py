"""The update's forward pass with each distinct prompt run once (a "prefix grouper").

A group-sampling micro-batch holds G responses to each prompt. The plain forward runs
prompt + response for every row, so each prompt is computed G times. Here the
distinct prompts run once (with gradients), their KV cache is copied to the rows
that share them (an index, so autograd sums the G rows' gradients into the one
prompt pass, exactly as the G separate passes would), and the responses run on
top of it. The logits of a response's first token are the prompt pass's last ones.
Same log-probs and gradients as the unshared pass (tested to 1e-5 / 1e-4 in float32);
on SmolLM2-135M with 46-token prompts, ~20-token responses and G = 4, about half the
tokens.
"""

from __future__ import annotations

import torch

from lmpo.masked import position_ids


def distinct_prompts(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor):
    """(first row of each distinct prompt [Q], [B] index of each row's prompt), or None when
    every prompt differs."""
    key = torch.cat([prompt_ids * prompt_mask, prompt_mask], dim=1)
    _, inverse = torch.unique(key, dim=0, return_inverse=True)
    if int(inverse.max()) + 1 == len(inverse):
        return None
    first = torch.full((int(inverse.max()) + 1,), len(inverse), dtype=torch.long,
                       device=inverse.device)
    first.scatter_reduce_(0, inverse, torch.arange(len(inverse), device=inverse.device),
                          reduce="amin")
    return first, inverse


def shared_prefix_logits(model, ids: torch.Tensor, mask: torch.Tensor, t: int):
    """Logits [B, T, V] predicting each of the last `t` tokens of `ids` ([B, P+T], left-padded
    prompts then responses), with the prompt pass shared among identical prompts; None when
    no prompt repeats (the caller runs the plain forward)."""
    from lmpo.rollout.sampler import cached_forward

    checkpointing = getattr(model, "is_activation_checkpointing", None)
    if checkpointing is None:  # transformers < 5
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing and model.training:
        return None  # checkpointed layers run without a KV cache
    p = ids.shape[1] - t
    groups = distinct_prompts(ids[:, :p], mask[:, :p])
    if groups is None:
        return None
    first, inverse = groups
    pos = position_ids(mask)
    out, cache = cached_forward(model, None, input_ids=ids[first, :p],
                                attention_mask=mask[first, :p], position_ids=pos[first, :p],
                                logits_to_keep=1)
    head = out.logits[:, -1][inverse]  # [B, V]: predicts each response's first token
    cache.batch_select_indices(inverse.to(ids.device))
    if t == 1:
        return head[:, None]
    out, _ = cached_forward(model, cache, input_ids=ids[:, p:-1], attention_mask=mask[:, :-1],
                            position_ids=pos[:, p:-1])
    return torch.cat([head[:, None], out.logits], dim=1)
