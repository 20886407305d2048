"""Every forward pass over the policy and the critic: the sampler's KV-cached steps
(`cached_forward`, `IncrementalValues` for the critic during sampling), the update's
teacher-forced pass over a rollout batch (`forward_logprobs`), the critic's values
(`critic_values`) and the SFT loss pass (`sft_loss`). The sampler, the update, SFT and the
benchmarks all import them from here.

The teacher-forced pass over a rollout batch runs without the work padding and repeated
prompts would cost. Two savings, each exact (same log-probs and gradients as one plain
forward of the padded batch, up to the order of float sums):

- **Shared prompts** (a "prefix grouper"). A group-sampling batch holds G responses to
  each prompt. The plain forward runs prompt + response for every row, so each prompt is
  computed G times. Here the distinct prompts run once (with gradients), their KV cache is
  copied to the rows that share them (an index, so autograd sums the G rows' gradients
  into the one prompt pass, exactly as the G separate passes would), and the responses run
  on top of it. The logits of a response's first token are the prompt pass's last ones.
- **Length buckets.** Responses are right-padded to the longest in the batch: with a
  128-token limit and responses of ~55 tokens, most of a padded pass is padding. The rows
  are sorted by response length and split into buckets (`length_buckets`), each run cut at
  its own longest response; positions past a row's response get log-prob and entropy 0
  (every caller masks them).
"""

from __future__ import annotations

import copy
import functools
import inspect
import math

import numpy as np
import torch
import torch.nn.functional as F

from lmpo.logprobs import logprobs_and_entropy, sum_squared_probs, token_logprobs
from lmpo.masked import position_ids


# ---------------------------------------------------------------- KV-cached passes
@functools.cache
def _cache_kwarg(forward) -> str:
    """transformers >= 5.24 calls the KV cache `cache`; earlier versions `past_key_values`."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def cached_forward(module, cache, **kw):
    """One forward pass with a KV cache; returns (output, updated cache). `module` may
    wrap a Hugging Face model (a peft adapter): the kwarg name is the wrapped model's."""
    inner = module
    while hasattr(inner, "get_base_model"):
        inner = inner.get_base_model()
    kw[_cache_kwarg(type(inner).forward)] = cache
    out = module(use_cache=True, **kw)
    return out, getattr(out, "cache", None) or out.past_key_values


class IncrementalValues:
    """Adapts a `lmpo.models.ValueModel` to the sampler: V(s_t) for each active row.

    The sampler calls `prefill` on the prompts, `step` after each new token and
    `select` when finished rows leave the batch.
    """

    def __init__(self, value_model):
        self.model = value_model
        self.cache = None

    def _run(self, **kw) -> torch.Tensor:
        out, self.cache = cached_forward(self.model.trunk, self.cache, **kw)
        return self.model.head(out.last_hidden_state[:, -1]).squeeze(-1)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.cache = None
        return self._run(input_ids=ids, attention_mask=mask, position_ids=position_ids(mask))

    def step(self, token: torch.Tensor, mask: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self._run(input_ids=token, attention_mask=mask, position_ids=pos)

    def select(self, keep: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep)


# ---------------------------------------------------------------- teacher-forced passes
BUCKET_OVERHEAD = 64
"""What one more forward call costs, in padded token positions (the fixed per-call work of
a pass: module calls, casts, the prompt cache's copy)."""


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


def length_buckets(lengths: list[int], overhead: float = BUCKET_OVERHEAD) -> list[list[int]]:
    """Row indices grouped by length: sorted, then split where the split minimises the
    padded positions plus `overhead` per group (sum over groups of rows x longest +
    overhead; dynamic programming over the sorted lengths). Equal lengths give one group."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    sizes = np.array([max(1, lengths[i]) for i in order], dtype=np.float64)
    best, cut = np.zeros(len(order) + 1), np.zeros(len(order) + 1, dtype=np.int64)
    for j in range(1, len(order) + 1):  # the last group is rows i..j-1, cut at sizes[j-1]
        cost = best[:j] + (j - np.arange(j)) * sizes[j - 1] + overhead
        cut[j] = int(np.argmin(cost))
        best[j] = cost[cut[j]]
    groups, j = [], len(order)
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def _checkpointing(model) -> bool:
    on = getattr(model, "is_activation_checkpointing", None)
    if on is None:  # transformers < 5
        on = getattr(model, "is_gradient_checkpointing", False)
    return bool(on) and model.training


class _Prompts:
    """The distinct prompts' pass (logits of each response's first token, KV cache)."""

    def __init__(self, model, ids, mask, pos, p: int, first, inverse):
        out, self.cache = cached_forward(model, None, input_ids=ids[first, :p],
                                         attention_mask=mask[first, :p],
                                         position_ids=pos[first, :p], logits_to_keep=1)
        self.head = out.logits[:, -1]  # [Q, V]
        self.inverse = inverse

    def cache_for(self, rows: torch.Tensor):
        """A cache holding `rows`' prompts; the shared one is left as it is (an index of
        its tensors, so gradients flow back to the one prompt pass)."""
        cache = copy.copy(self.cache)  # transformers >= 4.56: a cache holds its layers
        cache.layers = [copy.copy(layer) for layer in self.cache.layers]
        cache.batch_select_indices(self.inverse[rows])
        return cache


def _bucket_logits(model, prompts: _Prompts | None, ids, mask, pos, p: int, rows, tb: int):
    """Logits [n, tb, V] predicting response tokens 0..tb-1 of `rows`."""
    if prompts is None:
        return model(input_ids=ids[rows, :p + tb], attention_mask=mask[rows, :p + tb],
                     position_ids=pos[rows, :p + tb], logits_to_keep=tb + 1).logits[:, :tb]
    head = prompts.head[prompts.inverse[rows]][:, None]  # predicts each first token
    if tb == 1:
        return head
    out, _ = cached_forward(model, prompts.cache_for(rows), input_ids=ids[rows, p:p + tb - 1],
                            attention_mask=mask[rows, :p + tb - 1],
                            position_ids=pos[rows, p:p + tb - 1])
    return torch.cat([head, out.logits], dim=1)


def response_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                      temperature: float = 1.0, share_prompts: bool = True,
                      overhead: float | None = None, per_token=logprobs_and_entropy,
                      head=None):
    """(log-prob [B, T], entropy [B, T]) of the last T tokens of `ids` ([B, P+T]: left-padded
    prompts, then right-padded responses), bucketed by length and with each distinct prompt
    run once when `share_prompts` (see the module docstring). 0 past each response.
    `overhead`: `length_buckets`' (None: BUCKET_OVERHEAD; infinite: one padded pass).
    `per_token(logits, ids) -> ([rows, t, ...], ...)`: the quantities computed from each
    bucket's (temperature-scaled) logits, log-prob and entropy unless given.
    `head` ([B, T, k] token ids, or ALL): also the log-probs of those tokens (every token's
    with ALL) and the log-mass outside them (`head_logprobs`), with gradient."""
    b, t = response_ids.shape
    p = ids.shape[1] - t
    pos = position_ids(mask)
    steps = torch.arange(1, t + 1, device=mask.device)
    ends = (mask[:, p:].long() * steps).amax(1).tolist() if t else [0] * b  # last real token
    prompts = None
    if share_prompts and not _checkpointing(model):  # checkpointed layers keep no KV cache
        groups = distinct_prompts(ids[:, :p], mask[:, :p])
        if groups is not None:
            prompts = _Prompts(model, ids, mask, pos, p, *groups)
    parts, order = [], []
    for group in length_buckets(ends, BUCKET_OVERHEAD if overhead is None else overhead):
        rows = torch.tensor(group, dtype=torch.long, device=ids.device)
        tb = max(1, max(ends[i] for i in group))
        logits = _bucket_logits(model, prompts, ids, mask, pos, p, rows, tb)
        if temperature != 1.0:
            logits = logits / temperature
        outs = tuple(per_token(logits, response_ids[rows, :tb]))
        if head is not None:
            outs += head_logprobs(logits, None if head is ALL else head[rows, :tb])
        parts.append([F.pad(x, (0, 0) * (x.dim() - 2) + (0, t - tb)) for x in outs])
        order += group
    back = torch.empty(b, dtype=torch.long, device=ids.device)
    back[torch.tensor(order, device=ids.device)] = torch.arange(b, device=ids.device)
    return tuple(torch.cat(column)[back] for column in zip(*parts, strict=True))


ALL = "all"  # `head`: every token of the vocabulary


def head_logprobs(logits: torch.Tensor, head_ids: torch.Tensor | None):
    """(log pi at `head_ids` [rows, t, k] (every token's when None), the log of the mass
    outside them [rows, t], -inf where nothing is outside) from logits [rows, t, V], in
    float32; the tail's log-mass carries no gradient."""
    lsm = torch.log_softmax(logits.float(), dim=-1)
    if head_ids is None:
        return lsm, torch.full(lsm.shape[:-1], -math.inf, device=lsm.device)
    tail = lsm.detach().scatter(-1, head_ids, -math.inf).logsumexp(-1)
    return lsm.gather(-1, head_ids), tail


@torch.no_grad()
def behaviour_head(model, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                   temperature: float = 1.0, k: int | None = None):
    """The sampling distribution of `model` (the model that sampled) at every response
    position, teacher-forced: (its top-k token ids [B, T, k] or None, their log-probs
    [B, T, k] (every token's [B, T, V] when k is None), the log-mass outside them [B, T]),
    at `temperature`, in float32, as an engine returns its sampler's top-k log-probs
    (full-vocabulary probabilities, not renormalised)."""
    device = next(model.parameters()).device
    ids, mask, response_ids = ids.to(device), mask.to(device), response_ids.to(device)

    def per_token(logits, _ids):
        if k is None:
            return head_logprobs(logits, None)
        top = logits.float().topk(min(k, logits.shape[-1]), dim=-1).indices  # = log-softmax's
        return (top, *head_logprobs(logits, top))

    got = response_logprobs(model, ids, mask, response_ids, temperature, per_token=per_token)
    return (None, *got) if k is None else got


def shared_prefix_logits(model, ids: torch.Tensor, mask: torch.Tensor, t: int):
    """Logits [B, T, V] predicting each of the last `t` tokens of `ids` ([B, P+T], left-padded
    prompts then responses), with the prompt pass shared among identical prompts; None when
    no prompt repeats or the model checkpoints its layers."""
    if _checkpointing(model):
        return None
    p = ids.shape[1] - t
    groups = distinct_prompts(ids[:, :p], mask[:, :p])
    if groups is None:
        return None
    pos = position_ids(mask)
    prompts = _Prompts(model, ids, mask, pos, p, *groups)
    return _bucket_logits(model, prompts, ids, mask, pos, p,
                          torch.arange(len(ids), device=ids.device), t)


def forward_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, response_ids: torch.Tensor,
                     temperature: float = 1.0, with_entropy: bool = True,
                     share_prompts: bool = True, head=None):
    """log pi(response token) and entropy at every response position (0 past a response).

    ids/mask: [B, P+T] prompt + response; response_ids [B, T]. -> ([B, T], [B, T])
    The rows run in length buckets, each cut at its longest response, and with
    `share_prompts` each distinct prompt runs once (above): same values
    and gradients as one padded pass, less work. With `head` (token ids [B, T, k] or ALL):
    a third element, (log pi at those tokens [B, T, k], the log-mass outside them [B, T]).
    """
    device = next(model.parameters()).device
    ids, mask, response_ids = ids.to(device), mask.to(device), response_ids.to(device)
    head = head.to(device) if isinstance(head, torch.Tensor) else head
    got = response_logprobs(model, ids, mask, response_ids, temperature,
                            share_prompts=share_prompts, head=head)
    logp, ent = got[0], (got[1] if with_entropy else None)
    return (logp, ent) if head is None else (logp, ent, got[2:])


@torch.no_grad()
def distribution_gap(sampler, policy, ids: torch.Tensor, mask: torch.Tensor,
                     response_ids: torch.Tensor, temperature: float = 1.0,
                     rows_per_chunk: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """(TV [B, T], KL [B, T]) between the sampler's and the policy's full next-token
    distributions at every response position (0 past a response), in float32:
    TV = 1/2 sum_v |mu_v - pi_v|, KL(mu || pi) = sum_v mu_v (log mu_v - log pi_v), both at
    `temperature`. The rows run in length buckets and, within one, `rows_per_chunk` at a
    time, so that only [rows_per_chunk, t, V] logits of each model exist at once."""
    b, t = response_ids.shape
    p = ids.shape[1] - t
    pos = position_ids(mask)
    steps = torch.arange(1, t + 1, device=mask.device)
    ends = (mask[:, p:].long() * steps).amax(1).tolist() if t else [0] * b
    tv = torch.zeros(b, t, device=ids.device)
    kl = torch.zeros(b, t, device=ids.device)
    for group in length_buckets(ends):
        for start in range(0, len(group), rows_per_chunk):
            chunk = group[start:start + rows_per_chunk]
            rows = torch.tensor(chunk, dtype=torch.long, device=ids.device)
            tb = max(1, max(ends[i] for i in chunk))
            lq, lp = (F.log_softmax(_bucket_logits(m, None, ids, mask, pos, p, rows, tb).float()
                                    / temperature, dim=-1) for m in (sampler, policy))
            q = lq.exp()
            tv[rows, :tb] = 0.5 * (q - lp.exp()).abs().sum(-1)
            kl[rows, :tb] = (q * (lq - lp)).sum(-1).clamp(min=0.0)
    return tv * mask[:, p:], kl * mask[:, p:]


def forward_path_stats(model, ids: torch.Tensor, mask: torch.Tensor,
                       response_ids: torch.Tensor, temperature: float = 1.0):
    """(log pi(response token) [B, T], sum_v pi_v^2 [B, T]) at every response position, no
    gradient (0 past a response): what the optimal token baseline reads, as verl's actor
    returns old_log_probs and sum_pi_squared from one pass."""
    device = next(model.parameters()).device
    ids, mask, response_ids = ids.to(device), mask.to(device), response_ids.to(device)

    def per_token(logits, ids):
        return token_logprobs(logits, ids), sum_squared_probs(logits)

    with torch.no_grad():
        return response_logprobs(model, ids, mask, response_ids, temperature,
                                 per_token=per_token)


def critic_values(critic, ids: torch.Tensor, mask: torch.Tensor, t: int) -> torch.Tensor:
    """V(s_t) before each response token.  # [B, P+T] -> [B, T]"""
    return critic.values(ids, mask)[:, -t - 1:-1]


def sft_loss(model, ids: torch.Tensor, mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean next-token cross-entropy over the labelled positions (-100 elsewhere)."""
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss
