"""Simulated NVFP4 rollouts: the e2m1 grid and its ties, a block quantised by hand, an
independent float64 reference over random tensors, the rollout copy (what is quantised,
what is not) and the refusal with LoRA. Both decode paths and the mismatch diagnostic
are checked with FP8's tests in test_precision.py."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.models import load_policy
from lmpo.rollout import ROLLOUT_DTYPES, RolloutModel
from lmpo.rollout.precision import fake_quant_nvfp4, round_e2m1
from tests.test_precision import e4m3_round, quantised_copy

GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
EVEN = {0.0, 1.0, 2.0, 4.0}  # mantissa bit 0: where a tie goes


def e2m1_round(v: float) -> float:
    """Nearest value of the e2m1 grid (saturating at 6), ties to the even mantissa."""
    a = min(abs(v), 6.0)
    best = min(GRID, key=lambda g: (abs(g - a), g not in EVEN))
    return math.copysign(best, v) if best else 0.0


def nvfp4_reference(rows: list[list[float]], per_row: bool) -> list[list[float]]:
    """NVFP4 quantise-dequantise, scalar by scalar: blocks of 16 along a row (zero-padded),
    a float32 outer scale amax / 2688, block scales in e4m3 (at least 2^-6)."""
    def f32(v):
        return float(torch.tensor(v, dtype=torch.float32))

    tensor_amax = max(abs(v) for r in rows for v in r)
    out = []
    for r in rows:
        amax = max(abs(v) for v in r) if per_row else tensor_amax
        outer = f32(max(amax, 1e-12) / 2688.0)
        got = []
        for b in range(0, len(r), 16):
            block = r[b:b + 16]
            inner = f32(f32(max(abs(v) for v in block) / 6.0) / outer)
            scale = f32(e4m3_round(min(max(inner, 2.0 ** -6), 448.0)) * outer)
            got += [e2m1_round(f32(v / scale)) * scale for v in block]
        out.append(got)
    return out


def test_the_e2m1_grid_and_its_ties():
    v = torch.tensor([0.24, 0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, -0.75,
                      -3.5, 2.9999])
    want = [0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -1.0, -4.0, 3.0]
    assert round_e2m1(v).tolist() == want
    assert [e2m1_round(float(x)) for x in v] == want  # the reference agrees with itself


def test_a_block_quantised_by_hand():
    """One row, two blocks, tensor amax 3: the outer scale is 3 / 2688; the first block's
    scale is then exactly 448 in e4m3 (0.5 in all), so its values are 2v rounded on the
    grid and halved. The second block (amax 0.3) has 0.3 * 448 / 3 = 44.8, stored in e4m3
    as 44: its scale is 44 * 3 / 2688, and 0.3 / that = 6.11 saturates to 6."""
    first = [3.0, -2.9, 1.1, 0.3, 0.26, -0.74, 1.6, 2.4, 0.0, 0.124, 0.126, 1.25, -1.75,
             0.875, 2.2, -0.5]
    want1 = [3.0, -3.0, 1.0, 0.25, 0.25, -0.75, 1.5, 2.0, 0.0, 0.0, 0.25, 1.0, -2.0, 1.0,
             2.0, -0.5]
    second = [0.3, 0.1, -0.05] + [0.0] * 13
    s2 = 44 * 3 / 2688
    want2 = [6 * s2, 2 * s2, -1 * s2] + [0.0] * 13
    got = fake_quant_nvfp4(torch.tensor([first + second], dtype=torch.float64))[0]
    torch.testing.assert_close(got[:16], torch.tensor(want1, dtype=torch.float64),
                               rtol=0, atol=0)
    torch.testing.assert_close(got[16:], torch.tensor(want2, dtype=torch.float64),
                               rtol=1e-6, atol=0)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.floats(-6, 3), st.booleans(),
       st.integers(0, 2 ** 31 - 1))
def test_random_tensors_match_the_reference(n, k, log_scale, per_row, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k, generator=g, dtype=torch.float64) * 10.0 ** log_scale
    x = x * torch.rand(n, k, generator=g, dtype=torch.float64) ** 3  # uneven blocks
    got = fake_quant_nvfp4(x, per_row=per_row).tolist()
    for gr, wr in zip(got, nvfp4_reference(x.tolist(), per_row), strict=True):
        assert gr == pytest.approx(wr, rel=1e-6, abs=1e-30)
    # the error bound: a sixth of the block's amax (half of e2m1's widest step, 2 of 6,
    # widened by the e4m3 scale's 2^-4 rounding), or a quarter of the smallest block scale
    # (2^-6 of the outer one) where a block is that small against the tensor
    blocks_amax = torch.nn.functional.pad(x.abs(), (0, -k % 16)).reshape(n, -1, 16)
    bound = blocks_amax.amax(-1, keepdim=True).expand(-1, -1, 16).reshape(n, -1)[:, :k]
    outer = (x.abs().amax(1, keepdim=True) if per_row else x.abs().amax()) / 2688
    bound = torch.maximum(bound / 6 * (1 + 2 ** -4), outer * 2.0 ** -8)
    assert ((torch.tensor(got, dtype=torch.float64) - x).abs() <= bound * (1 + 1e-6)).all()


def test_the_fp4_copy_quantises_the_decoder_linears_only(tiny_policy_dir):
    assert "fp4_e2m1" in ROLLOUT_DTYPES
    policy, _ = load_policy(tiny_policy_dir)
    copy = quantised_copy(policy, "fp4_e2m1", fake_quant_nvfp4)
    x = torch.randn(3, 5, policy.config.hidden_size)
    torch.testing.assert_close(copy.lmpo_act_quant(x),
                               torch.stack([fake_quant_nvfp4(t, per_row=True) for t in x]),
                               rtol=0, atol=0)
    assert not hasattr(RolloutModel(policy, "fp4_e2m1", fp8_activations=False)(),
                       "lmpo_act_quant")


def test_fp4_with_lora_is_refused_before_any_work(tiny_policy_dir):
    from lmpo.config import ConfigError, load_config
    from lmpo.trainer.train_config import TrainConfig

    with pytest.raises(ConfigError, match="fp4_e2m1 quantises the decoder's linear layers"):
        load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}",
                                          "rollout.dtype=fp4_e2m1", "lora.r=4"]).validate()


def test_the_bf16_boundary_keeps_the_first_and_last_decoder_layers_out(tiny_policy_dir):
    """rollout.bf16_boundary: layers 0 and L-1 are a plain bfloat16 cast (weights) and
    their inputs are not quantised, in both decode paths; layers 1..L-2 are NVFP4 as
    before, each weight the block quantiser of the float32 weight; the two decode paths
    still agree, and the boundary moves the logits."""
    from lmpo.rollout.fast_llama import FastLlamaDecoder
    from tests.test_precision import last_logits

    policy, tok = load_policy(tiny_policy_dir)
    n = policy.config.num_hidden_layers
    copy = RolloutModel(policy, "fp4_e2m1", bf16_boundary=True)()
    assert copy.lmpo_quant_layers == list(range(1, n - 1)) and n >= 3
    for i, layer in enumerate(copy.model.layers):
        for proj in (layer.self_attn.q_proj, layer.mlp.down_proj):
            theirs = dict(policy.named_parameters())[
                [k for k, p in copy.named_parameters() if p is proj.weight][0]].detach()
            want = theirs.to(torch.bfloat16) if i in (0, n - 1) else \
                fake_quant_nvfp4(theirs).to(torch.bfloat16)
            assert torch.equal(proj.weight, want), i
            assert bool(proj._forward_pre_hooks) == (0 < i < n - 1), i
    fast = FastLlamaDecoder(copy, torch.ones(1, 3, dtype=torch.long), capacity=8)
    x = torch.randn(2, 16) * 3
    assert [torch.equal(layer["quant"](x), x) for layer in fast.layers] == \
        [i in (0, n - 1) for i in range(n)]
    ids = torch.tensor([tok.encode("12+7-3=9,6") for _ in range(2)])
    edged = copy.float()
    assert (last_logits(edged, ids, True) - last_logits(edged, ids, False)).abs().max() < 1e-4
    every = RolloutModel(policy, "fp4_e2m1")().float()
    assert (last_logits(every, ids, True) - last_logits(edged, ids, True)).abs().max() > 1e-3


def test_the_bf16_boundary_needs_a_quantised_rollout(tiny_policy_dir):
    from lmpo.config import ConfigError, load_config
    from lmpo.trainer.train_config import TrainConfig

    with pytest.raises(ConfigError, match="rollout.bf16_boundary .* needs one of rollout.dtype "
                                          "fp8_e4m3, fp4_e2m1, mxfp8, got bfloat16"):
        load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}", "rollout.dtype=bfloat16",
                                          "rollout.bf16_boundary=true"]).validate()


def test_a_short_run_with_fp4_rollouts_and_the_bf16_boundary(tiny_policy_dir, tmp_path):
    """Three steps with NVFP4 rollouts that keep the boundary layers in bf16: the run logs
    the rollout's mismatch against the float32 policy, which is non-zero and smaller than
    with every layer quantised (same seed, same first batch)."""
    from lmpo.trainer.checkpoint import read_rows
    from lmpo.trainer.loop import train
    from tests.test_robustness import tiny

    gaps = {}
    for edge in (True, False):
        cfg = tiny(tiny_policy_dir, "steps=3", "rollout.dtype=fp4_e2m1",
                   f"rollout.bf16_boundary={str(edge).lower()}")
        train(cfg, tmp_path / str(edge), progress=False)
        rows = read_rows(tmp_path / str(edge) / "metrics.jsonl")
        assert [r["step"] for r in rows] == [1, 2, 3]
        gaps[edge] = rows[0]["rollout/logp_mismatch"]
    assert 0 < gaps[True] < gaps[False]
