"""Simulated MXFP8 rollouts: a block quantised by hand, an independent float64 reference
(scalar by scalar) over random tensors with its error bound, and the rollout copy (the
decoder's linears only). Both decode paths and the mismatch diagnostic are checked with
FP8's tests in test_precision.py."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.models import load_policy
from lmpo.rollout import ROLLOUT_DTYPES, RolloutModel
from lmpo.rollout.precision import fake_quant_mxfp8
from tests.test_precision import e4m3_round, quantised_copy


def mxfp8_reference(rows: list[list[float]]) -> list[list[float]]:
    """MXFP8 quantise-dequantise, scalar by scalar: blocks of 32 along a row (zero-padded),
    the block's scale the smallest power of two s with amax / s <= 448 (2^-127 for an
    all-zero block), its values e4m3-rounded."""
    out = []
    for r in rows:
        got = []
        for b in range(0, len(r), 32):
            block = r[b:b + 32]
            amax = max(abs(v) for v in block)
            e = math.ceil(math.log2(amax / 448.0)) if amax > 0 else -127
            scale = 2.0 ** min(max(e, -127), 127)
            got += [e4m3_round(v / scale) * scale for v in block]
        out.append(got)
    return out


def test_a_block_quantised_by_hand():
    """Block 1 (amax 7): 7 / 448 = 1/64, so the scale is 2^-6 and v / scale = 64 v: 7 ->
    448 exactly, 0.3 -> 19.2, which e4m3 (step 2 in [16, 32)) rounds to 20 -> 0.3125;
    1.01 -> 64.64 (step 8 in [64, 128)) -> 64 -> 1.0. Block 2 (amax 500): 500 / 448 is
    just over 1, so the scale is 2 (not 1: no value saturates): 500 -> 250 (step 16 in
    [128, 256)) -> 256 -> 512; 3 -> 1.5 -> 3. A last short block pads with zeros; an
    all-zero block stays zero."""
    first = [7.0, 0.3, 1.01] + [0.0] * 29
    second = [500.0, 3.0] + [0.0] * 30
    third = [0.0] * 5
    got = fake_quant_mxfp8(torch.tensor([first + second + third], dtype=torch.float64))[0]
    want = [7.0, 0.3125, 1.0] + [0.0] * 29 + [512.0, 3.0] + [0.0] * 30 + [0.0] * 5
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70), st.floats(-30, 30), st.integers(0, 2 ** 31 - 1))
def test_random_tensors_match_the_reference_within_the_e4m3_step(n, k, log_scale, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k, generator=g, dtype=torch.float64) * 10.0 ** log_scale
    x = x * torch.rand(n, k, generator=g, dtype=torch.float64) ** 3  # uneven blocks
    got = fake_quant_mxfp8(x).tolist()
    for gr, wr in zip(got, mxfp8_reference(x.tolist()), strict=True):
        assert gr == pytest.approx(wr, rel=1e-12, abs=0)
    # never saturates; the error is at most half an e4m3 step (2^-4 of the value) or
    # half the subnormal step (2^-10 of the scale)
    blocks = torch.nn.functional.pad(x.abs(), (0, -k % 32)).reshape(n, -1, 32)
    scale = torch.exp2(torch.ceil(torch.log2(blocks.amax(-1, keepdim=True) / 448)))
    scale = scale.expand(-1, -1, 32).reshape(n, -1)[:, :k]
    err = (torch.tensor(got, dtype=torch.float64) - x).abs()
    assert (err <= torch.maximum(x.abs() * 2.0 ** -4, scale * 2.0 ** -10) * (1 + 1e-12)).all()


def test_the_mxfp8_copy_quantises_the_decoder_linears_only(tiny_policy_dir):
    assert "mxfp8" in ROLLOUT_DTYPES
    policy, _ = load_policy(tiny_policy_dir)
    copy = quantised_copy(policy, "mxfp8", fake_quant_mxfp8)  # linears on the grid, else bf16
    x = torch.randn(3, 5, policy.config.hidden_size)
    torch.testing.assert_close(copy.lmpo_act_quant(x), fake_quant_mxfp8(x), rtol=0, atol=0)
    assert not hasattr(RolloutModel(policy, "mxfp8", fp8_activations=False)(),
                       "lmpo_act_quant")
