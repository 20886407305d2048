"""The update's shared prompt pass: same log-probs and gradients as the plain forward."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.models import build_policy, build_tokenizer
from lmpo.models.forward import distinct_prompts, forward_logprobs, shared_prefix_logits
from lmpo.rollout import sample
from tests.test_architectures import BUILDERS


def float64_norms(monkeypatch):
    """HF's RMSNorms compute in float32 even for a float64 model, which would hide any
    difference below 1e-7; for the exactness check they keep the input's precision."""
    from transformers.models.gemma3 import modeling_gemma3
    from transformers.models.llama import modeling_llama
    from transformers.models.qwen3 import modeling_qwen3

    def llama_norm(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True)
                                              + self.variance_epsilon))

    def gemma_norm(self, x):
        return self._norm(x) * (1.0 + self.weight)

    monkeypatch.setattr(modeling_llama.LlamaRMSNorm, "forward", llama_norm)
    monkeypatch.setattr(modeling_qwen3.Qwen3RMSNorm, "forward", llama_norm)
    monkeypatch.setattr(modeling_gemma3.Gemma3RMSNorm, "forward", gemma_norm)


def models():
    tok = build_tokenizer()
    torch.manual_seed(0)
    yield "llama", build_policy("nano", tok, seed=3), tok
    for name, build in BUILDERS.items():
        yield name, build(tok), tok


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, model, tok", list(models()), ids=["llama", *BUILDERS])
def test_shared_prefix_logp_and_gradients_equal_the_plain_forward(name, model, tok, dtype,
                                                                  monkeypatch):
    """Exact in float64 (1e-10); in float32 log-probs to 1e-5 and each gradient tensor to
    1e-4 of its norm (the G responses' gradients reach the prompt pass summed in one
    place instead of G, which reorders float32 sums)."""
    if dtype == torch.float64:
        float64_norms(monkeypatch)
    model = model.to(dtype)
    prompts = [tok.encode(p) for p in ["12+7=", "1+2+3=", "99-1+5=", "4="] for _ in range(3)]
    prompts.append(tok.encode("5*5="))  # a prompt of its own
    with torch.no_grad():
        r = sample(model.eval(), prompts, max_new_tokens=10, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(1))
    model.train()
    ids, mask = r.full_sequences()
    weights = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(2),
                          dtype=dtype)
    out = {}
    for share in (True, False):
        model.zero_grad()
        logp, ent = forward_logprobs(model, ids, mask, r.response_ids, temperature=0.8,
                                     share_prompts=share)
        ((logp * weights + 0.1 * ent) * r.response_mask).sum().backward()
        out[share] = (logp.detach(), ent.detach(),
                      [p.grad.clone() for p in model.parameters()])
    exact = dtype == torch.float64
    m = r.response_mask.to(dtype)
    tol = 1e-10 if exact else 1e-5
    torch.testing.assert_close(out[True][0] * m, out[False][0] * m, rtol=0, atol=tol)
    torch.testing.assert_close(out[True][1] * m, out[False][1] * m, rtol=0, atol=tol)
    for g_shared, g_plain in zip(out[True][2], out[False][2], strict=True):
        if exact:
            torch.testing.assert_close(g_shared, g_plain, rtol=1e-10, atol=1e-12)
        else:
            assert (g_shared - g_plain).norm() <= 1e-4 * g_plain.norm()


def test_distinct_prompts_ignores_padding_and_falls_back_when_nothing_repeats():
    ids = torch.tensor([[0, 5, 6], [9, 5, 6], [7, 7, 6], [0, 5, 6]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 1, 1]])
    first, inverse = distinct_prompts(ids, mask)  # rows 0, 1, 3 are "5 6" (pad id differs)
    assert inverse[0] == inverse[1] == inverse[3] != inverse[2]
    assert sorted(first.tolist()) == [0, 2]
    assert distinct_prompts(ids[1:3], mask[1:3]) is None
    tok = build_tokenizer()
    model = build_policy("nano", tok)
    assert shared_prefix_logits(model, ids[1:3], mask[1:3], 1) is None


def test_gradient_checkpointing_changes_memory_not_gradients(monkeypatch):
    """Float64 (norms too), so equal means equal: checkpointing recomputes the same math."""
    from lmpo.trainer.runtime import enable_checkpointing

    float64_norms(monkeypatch)
    tok = build_tokenizer()
    model = build_policy("nano", tok, seed=4).double()
    prompts = [tok.encode(p) for p in ["12+7=", "1+2+3="] for _ in range(2)]
    with torch.no_grad():
        r = sample(model.eval(), prompts, max_new_tokens=8, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(1))
    ids, mask = r.full_sequences()
    grads = []
    for checkpointing in (False, True):
        if checkpointing:
            enable_checkpointing(model)
        model.train().zero_grad()
        logp, _ = forward_logprobs(model, ids, mask, r.response_ids)  # falls back to unshared
        (logp * r.response_mask).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("share", [True, False])
def test_length_buckets_equal_one_padded_pass(share, monkeypatch):
    """Responses of many lengths (cut at 1-10 tokens): the bucketed pass (overhead 0, so
    nearly every length its own bucket) equals one pass over the padded batch (infinite
    overhead: one bucket) in float64, log-probs, entropies and every gradient; past each
    response both are masked out (the bucketed pass writes 0 there)."""
    from lmpo.models.forward import response_logprobs

    float64_norms(monkeypatch)
    tok = build_tokenizer()
    model = build_policy("nano", tok, seed=5).double()
    prompts = [tok.encode(p) for p in ["12+7=", "1+2+3=", "8-3="] for _ in range(4)]
    with torch.no_grad():
        r = sample(model.eval(), prompts, max_new_tokens=10, eos_token_id=tok.eos_token_id,
                   pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(3))
    cut = torch.tensor([1, 10, 4, 7, 2, 10, 9, 3, 5, 6, 8, 1])  # right padding from here
    keep = torch.arange(10)[None, :] < cut[:, None]
    r.response_mask = r.response_mask * keep
    r.response_ids = r.response_ids.masked_fill(~keep, tok.pad_token_id)
    model.train()
    ids, mask = r.full_sequences()
    m = r.response_mask.double()
    weights = torch.randn(m.shape, generator=torch.Generator().manual_seed(4), dtype=m.dtype)
    out = []
    for overhead in (0.0, float("inf")):
        model.zero_grad()
        logp, ent = response_logprobs(model, ids, mask, r.response_ids, 0.7,
                                      share_prompts=share, overhead=overhead)
        ((logp * weights + 0.1 * ent) * m).sum().backward()
        out.append((logp.detach() * m, ent.detach() * m,
                    [p.grad.clone() for p in model.parameters()]))
    (lp0, h0, g0), (lp1, h1, g1) = out
    torch.testing.assert_close(lp0, lp1, rtol=0, atol=1e-10)
    torch.testing.assert_close(h0, h1, rtol=0, atol=1e-10)
    for a, b in zip(g0, g1, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=7), st.sampled_from([0.0, 3.0, 50.0]))
def test_length_buckets_partition_rows_at_least_cost(lengths, overhead):
    """Every row in exactly one bucket, and the split's cost (rows x longest + overhead per
    bucket) is the least over every partition of the sorted rows into runs (brute force)."""
    from itertools import combinations

    from lmpo.models.forward import length_buckets

    groups = length_buckets(lengths, overhead)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))

    def cost(parts):
        return sum(len(g) * max(max(1, lengths[i]) for i in g) + overhead for g in parts)

    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    n = len(order)
    best = min(cost([order[a:b] for a, b in zip((0, *cuts), (*cuts, n), strict=True)])
               for k in range(n) for cuts in combinations(range(1, n), k))
    assert cost(groups) == pytest.approx(best)
