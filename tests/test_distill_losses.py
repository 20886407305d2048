"""On-policy distillation's divergences (`lmpo.losses.distill`) against float64 references
written term by term: a hand example; the chunked full-vocabulary forward KL's value and
gradient (softmax(z) - p) at any chunk size; TRL's generalised JSD at its ends and its
symmetry; the tail bucket's KL is non-negative, below the full KL (coarse-graining) and
equal to it when the tail is one token; the top-k forms equal the full ones when k = V;
verl's clamp."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.losses.distill import (
    forward_kl,
    forward_kl_topk,
    forward_kl_topk_tail,
    jsd,
    reverse_kl_topk,
    teacher_topk,
)


def kl(a: list[float], b: list[float]) -> float:
    """sum_i a_i log(a_i / b_i), term by term in Python floats."""
    return sum(x * math.log(x / y) for x, y in zip(a, b, strict=True) if x > 0)


def logp(probs: list[float]) -> torch.Tensor:
    return torch.log(torch.tensor(probs, dtype=torch.float64))


P = [0.5, 0.3, 0.15, 0.05]  # the teacher
Q = [0.1, 0.2, 0.3, 0.4]  # the student


def test_the_hand_example():
    lq, lp = logp(Q), logp(P)
    got, q_mass, p_mass = reverse_kl_topk(lq, lp, 2)  # the student's top 2: tokens 3, 2
    assert float(got) == pytest.approx(0.4 * math.log(0.4 / 0.05) + 0.3 * math.log(0.3 / 0.15),
                                       abs=1e-12)
    assert (float(q_mass), float(p_mass)) == pytest.approx((0.7, 0.2), abs=1e-12)
    ids, top = teacher_topk(lp, 2)  # the teacher's top 2: tokens 0, 1
    trunc = 0.5 * math.log(0.5 / 0.1) + 0.3 * math.log(0.3 / 0.2)
    assert float(forward_kl_topk(lq, ids, top)[0]) == pytest.approx(trunc, abs=1e-12)
    tail = 0.2 * math.log(0.2 / 0.7)  # the bucket: p 0.2, q 0.7
    assert float(forward_kl_topk_tail(lq, ids, top)[0]) == pytest.approx(trunc + tail, abs=1e-12)
    assert float(jsd(lq, lp, 0.0)) == pytest.approx(kl(P, Q), abs=1e-12)
    assert float(jsd(lq, lp, 1.0)) == pytest.approx(kl(Q, P), abs=1e-12)
    m = [0.5 * x + 0.5 * y for x, y in zip(P, Q, strict=True)]
    assert float(jsd(lq, lp, 0.5)) == pytest.approx(0.5 * kl(P, m) + 0.5 * kl(Q, m), abs=1e-12)


def test_verls_clamp_at_zero_where_the_student_holds_more_of_the_top_k():
    lq, lp = logp([0.45, 0.45, 0.05, 0.05]), logp(P)
    ids, top = teacher_topk(lp, 2)
    assert kl([0.5, 0.3], [0.45, 0.45]) < 0  # truncated: not a KL
    assert float(forward_kl_topk(lq, ids, top)[0]) == 0.0
    assert float(forward_kl_topk_tail(lq, ids, top)[0]) > 0  # the bucket restores it


distributions = st.integers(2, 9).flatmap(lambda v: st.tuples(
    st.lists(st.floats(-5, 5), min_size=v, max_size=v),
    st.lists(st.floats(-5, 5), min_size=v, max_size=v)))


@settings(max_examples=80, deadline=None)
@given(distributions, st.integers(1, 8))
def test_the_tail_bucket_is_a_coarse_grained_kl(pair, k):
    zq, zp = (torch.tensor(x, dtype=torch.float64) for x in pair)
    lq, lp = torch.log_softmax(zq, -1), torch.log_softmax(zp, -1)
    k = min(k, len(zq))
    full = float(jsd(lq, lp, 0.0))
    ids, top = teacher_topk(lp, k)
    got = float(forward_kl_topk_tail(lq, ids, top, tail_mass_eps=1e-300)[0])
    assert -1e-12 <= got <= full + 1e-12
    if k >= len(zq) - 1:  # one token or none outside: the coarse-graining is the identity
        assert got == pytest.approx(full, abs=1e-10)
    if k == len(zq):
        assert float(forward_kl_topk(lq, ids, top)[0]) == pytest.approx(full, abs=1e-12)
        assert float(reverse_kl_topk(lq, lp, k)[0]) == pytest.approx(float(jsd(lq, lp, 1.0)),
                                                                      abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(distributions, st.floats(0.01, 0.99))
def test_the_generalised_jsd_is_symmetric_under_swap_and_bounded(pair, beta):
    zq, zp = (torch.tensor(x, dtype=torch.float64) for x in pair)
    lq, lp = torch.log_softmax(zq, -1), torch.log_softmax(zp, -1)
    got = float(jsd(lq, lp, beta))
    assert got == pytest.approx(float(jsd(lp, lq, 1 - beta)), abs=1e-12)
    assert -1e-12 <= got <= -beta * math.log(beta) - (1 - beta) * math.log(1 - beta) + 1e-12


@pytest.mark.parametrize("chunk", [1, 3, 7, 100])
def test_the_chunked_forward_kl_equals_the_full_one_and_its_gradient(chunk):
    g = torch.Generator().manual_seed(0)
    z = torch.randn(5, 2, 7, generator=g, dtype=torch.float64, requires_grad=True)
    lp = torch.log_softmax(torch.randn(5, 2, 7, generator=g, dtype=torch.float64), -1)
    got = forward_kl(z, lp, chunk=chunk)
    want = jsd(torch.log_softmax(z, -1), lp, 0.0)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-13)
    weights = torch.randn(5, 2, generator=g, dtype=torch.float64)
    (grad,) = torch.autograd.grad((got * weights).sum(), z)
    expected = weights[..., None] * (torch.softmax(z, -1) - lp.exp())
    torch.testing.assert_close(grad, expected.detach(), rtol=0, atol=1e-13)
    assert torch.autograd.gradcheck(lambda x: forward_kl(x, lp, chunk=chunk), (z,))


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="beta must be in"):
        jsd(logp(Q), logp(P), 1.5)
    with pytest.raises(ValueError, match="must have one shape"):
        forward_kl(torch.zeros(2, 4), torch.zeros(2, 5))
