"""Masks that apply to any loss (lmpo.losses.masks): OPSM against a per-row float64
reference written from DeepSeek-V3.2's Eq. 9 as TRL implements it, and by hand."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.losses import off_policy_sequence_mask


def reference(logp, sampler, adv, mask, threshold):
    keep = []
    for lp_row, s_row, a_row, m_row in zip(logp, sampler, adv, mask, strict=True):
        n = sum(m_row)
        kl = sum((0.0 if math.isnan(s) else s - lp) for lp, s, m in zip(lp_row, s_row, m_row,
                                                                        strict=True) if m)
        low = kl / max(n, 1) <= threshold
        keep.append([1.0 if (a >= 0 or low) else 0.0 for a in a_row])
    return keep


def test_by_hand():
    # row 0 moved 0.3 nats on average (its tokens: 0.2, 0.4), row 1 0.05, row 2 is empty
    sampler = torch.tensor([[-1.0, -2.0, 0.0], [-1.0, -1.0, -1.0], [0.0, 0.0, 0.0]],
                           dtype=torch.float64)
    logp = torch.tensor([[-1.2, -2.4, -9.0], [-1.05, -1.05, -1.05], [0.0, 0.0, 0.0]],
                        dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    adv = torch.tensor([[-1.0, 2.0, -1.0], [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]],
                       dtype=torch.float64)
    keep, metrics = off_policy_sequence_mask(logp, sampler, adv, mask, 0.1)
    assert keep.tolist() == [[0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert metrics["opsm/masked_frac"] == pytest.approx(1 / 5)
    assert metrics["opsm/seq_kl_mean"] == pytest.approx((0.3 + 0.05) / 2)
    keep, _ = off_policy_sequence_mask(logp, sampler, adv[:, 0], mask, 0.1)  # adv [B]
    assert keep[0].tolist() == [0.0, 0.0, 0.0]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), threshold=st.floats(0.0, 0.3), b=st.integers(1, 6),
       t=st.integers(1, 7), nan=st.booleans())
def test_equals_the_reference(seed, threshold, b, t, nan):
    g = torch.Generator().manual_seed(seed)
    sampler = torch.log(torch.rand(b, t, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    logp = sampler + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    if nan:
        sampler[0, 0] = float("nan")
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) < 0.7).long()
    keep, _ = off_policy_sequence_mask(logp, sampler, adv, mask, threshold)
    assert keep.tolist() == reference(logp.tolist(), sampler.tolist(), adv.tolist(),
                                      mask.tolist(), threshold)
