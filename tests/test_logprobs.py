"""Chunked log-probs and entropy equal the naive log-softmax path."""

from __future__ import annotations

import pytest
import torch

from lmpo.logprobs import entropy, naive_entropy, naive_token_logprobs, token_logprobs


@pytest.mark.parametrize("chunk", [1, 3, 512])
def test_values_and_gradients_match_naive_in_float64(chunk):
    g = torch.Generator().manual_seed(0)
    logits = (4 * torch.randn(3, 7, 50, generator=g, dtype=torch.float64)).requires_grad_(True)
    ids = torch.randint(0, 50, (3, 7), generator=g)
    w1, w2 = torch.randn(3, 7, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64)

    lp = token_logprobs(logits, ids, chunk_rows=chunk)
    h = entropy(logits, chunk_rows=chunk)
    torch.testing.assert_close(lp, naive_token_logprobs(logits, ids), rtol=1e-6, atol=1e-12)
    torch.testing.assert_close(h, naive_entropy(logits), rtol=1e-6, atol=1e-12)
    (ga,) = torch.autograd.grad((lp * w1).sum() + (h * w2).sum(), logits)
    naive = (naive_token_logprobs(logits, ids) * w1).sum() + (naive_entropy(logits) * w2).sum()
    (gb,) = torch.autograd.grad(naive, logits)
    torch.testing.assert_close(ga, gb, rtol=1e-6, atol=1e-12)


def test_gradcheck():
    logits = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 6, (2, 3))
    assert torch.autograd.gradcheck(lambda z: token_logprobs(z, ids, chunk_rows=2), (logits,))
    assert torch.autograd.gradcheck(lambda z: entropy(z, chunk_rows=4), (logits,))


def test_bfloat16_logits_are_computed_in_float32():
    logits = torch.randn(2, 5, 300).to(torch.bfloat16)
    ids = torch.randint(0, 300, (2, 5))
    lp = token_logprobs(logits, ids)
    assert lp.dtype == torch.float32
    torch.testing.assert_close(lp, naive_token_logprobs(logits, ids), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_reduction_stays_float32_under_the_updates_autocast(dtype):
    """optim.dtype bfloat16 runs the passes under torch.autocast, which would run E_p[z]'s
    product in bfloat16 (up to 0.25 nats of entropy error per token at a 49k vocabulary):
    under autocast the values and gradients are those computed without it, exactly."""
    from lmpo.logprobs import logprobs_and_entropy

    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(4, 5, 4096, generator=g) + 20).to(dtype)
    logits[..., :5] += 8.0
    ids = torch.randint(0, 4096, (4, 5), generator=g)
    w = torch.randn(4, 5, generator=g)

    def run(enabled):
        x = logits.clone().requires_grad_(True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
            lp, h = logprobs_and_entropy(x, ids)
            (grad,) = torch.autograd.grad((lp * w).sum() + (h * w).sum(), x)
        return lp, h, grad

    for plain, cast in zip(run(False), run(True), strict=True):
        assert torch.equal(plain, cast)
    exact = naive_entropy(logits.double())
    torch.testing.assert_close(run(True)[1].double(), exact, rtol=0, atol=1e-4)


def test_shape_error():
    with pytest.raises(ValueError, match=r"ids shape \(2, 4\)"):
        token_logprobs(torch.zeros(2, 5, 3), torch.zeros(2, 4, dtype=torch.long))


def test_fused_matches_naive_and_unused_entropy_is_skipped():
    from lmpo.logprobs import logprobs_and_entropy, naive_logprobs_and_entropy

    g = torch.Generator().manual_seed(1)
    logits = torch.randn(4, 3, 20, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.randint(0, 20, (4, 3), generator=g)
    for chunk in (None, 5):
        lp, h = logprobs_and_entropy(logits, ids, chunk_rows=chunk)
        nlp, nh = naive_logprobs_and_entropy(logits, ids)
        torch.testing.assert_close((lp, h), (nlp, nh), rtol=1e-6, atol=1e-12)
        (ga,) = torch.autograd.grad(lp.sum(), logits)  # entropy unused: its grad is None
        (gb,) = torch.autograd.grad(nlp.sum(), logits)
        torch.testing.assert_close(ga, gb, rtol=1e-6, atol=1e-12)
