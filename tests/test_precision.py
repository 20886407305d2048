"""Low-precision rollouts: float8 e4m3 quantisation against an independent rounding
reference, the simulated FP8 rollout copy (what is quantised, what is not, both decode
paths), float16, and the mismatch diagnostic against a float64 recompute."""

from __future__ import annotations

import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lmpo.models import load_policy
from lmpo.rollout import RolloutModel, sample
from lmpo.rollout.precision import (
    E4M3_MAX,
    fake_quant_e4m3,
    mismatch_metrics,
    quantised_linears,
    quantize_e4m3,
)


def e4m3_round(v: float) -> float:
    """Round to the nearest float8 e4m3 (fn) value, ties to even, saturating at 448: 3
    mantissa bits, exponent bias 7, normals from 2^-6, subnormals in steps of 2^-9."""
    a = abs(v)
    if a == 0:
        return 0.0
    e = max(math.floor(math.log2(a)), -6)  # below 2^-6 the step is the subnormal one
    step = 2.0 ** (e - 3)
    q = a / step
    lo = math.floor(q)
    frac = q - lo
    n = lo + 1 if frac > 0.5 or (frac == 0.5 and lo % 2 == 1) else lo
    return math.copysign(min(n * step, E4M3_MAX), v)


@given(st.lists(st.floats(-5.0, 5.0, allow_nan=False), min_size=2, max_size=12))
def test_e4m3_rounding_matches_the_reference_and_its_error_bound(row):
    x = torch.tensor([row], dtype=torch.float64)
    q, scale = quantize_e4m3(x, dim=1)
    amax = max(abs(v) for v in row)
    s = max(amax, 1e-12) / 448.0
    assert math.isclose(float(scale), s, rel_tol=1e-6)  # float32 scale
    got = (q.double() * scale.double())[0].tolist()
    s32 = float(scale)
    for v, g in zip(row, got, strict=True):
        want = e4m3_round(float(torch.tensor(v / s32, dtype=torch.float32))) * s32
        assert g == pytest.approx(want, rel=1e-6, abs=1e-30)
        # round-trip error: half a step, 2^-4 relative for normals, 2^-10 x scale below
        assert abs(g - v) <= max(abs(v) * 2.0 ** -4, s32 * 2.0 ** -10) * (1 + 1e-5) + 1e-12


def test_weights_get_one_scale_per_output_channel():
    w = torch.randn(6, 10, dtype=torch.float64) * torch.logspace(-3, 2, 6)[:, None]
    q, scale = quantize_e4m3(w, dim=1)
    assert scale.shape == (6, 1) and q.dtype == torch.float8_e4m3fn
    torch.testing.assert_close(scale.double().squeeze(1), w.abs().amax(1) / 448,
                               rtol=1e-6, atol=0)
    assert torch.equal(q.float().abs().amax(1), torch.full((6,), 448.0))  # each row's max
    deq = fake_quant_e4m3(w, dim=1)
    assert ((deq - w).abs() <= w.abs() * 2 ** -4 + scale.double() * 2 ** -10).all()


def quantised_copy(policy, dtype: str, weight_quant):
    """The rollout copy of `dtype`, refreshed after the policy moved: exactly the decoder's
    7 linears per layer carry `weight_quant` of the float32 weights, everything else is a
    bfloat16 cast. Returns the copy."""
    rm = RolloutModel(policy, dtype)
    with torch.no_grad():
        for p in policy.parameters():
            p.mul_(1.01)
    copy = rm()
    linears = quantised_linears(copy)
    assert len(linears) == 7 * policy.config.num_hidden_layers  # q k v o gate up down
    live = dict(policy.named_parameters())
    for name, param in copy.named_parameters():
        theirs = live[name].detach()
        if any(param is m.weight for m in linears):
            want = weight_quant(theirs).to(torch.bfloat16)
        else:  # embeddings, norms and the LM head: bfloat16 only
            want = theirs.to(torch.bfloat16)
        assert torch.equal(param, want), name
    return copy


def test_the_fp8_copy_quantises_the_decoder_linears_only_and_follows_the_policy(
        tiny_policy_dir):
    policy, _ = load_policy(tiny_policy_dir)
    copy = quantised_copy(policy, "fp8_e4m3", lambda w: fake_quant_e4m3(w, dim=1))
    linears = quantised_linears(copy)
    assert all(b.dtype == torch.float32 for b in copy.buffers())
    assert copy.lmpo_act_quant is fake_quant_e4m3  # the fast decoder's per-token inputs
    assert all(len(m._forward_pre_hooks) == 1 for m in linears)  # the generic path's
    weights_only = RolloutModel(policy, "fp8_e4m3", fp8_activations=False)()
    assert not hasattr(weights_only, "lmpo_act_quant")
    assert not any(m._forward_pre_hooks for m in quantised_linears(weights_only))


def rollout_gap(policy, tok, model, fast: bool):
    prompts = [tok.encode(f"{a}+{b}=") for a, b in ((3, 4), (12, 9), (7, 7), (1, 8))] * 2
    r = sample(model, prompts, max_new_tokens=8, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(0),
               fast=fast)
    return r


def last_logits(model, ids, fast: bool):
    from lmpo.rollout.fast_llama import FastLlamaDecoder

    mask = torch.ones_like(ids)
    pos = torch.arange(ids.shape[1]).expand_as(ids)
    with torch.no_grad():
        if fast:
            return FastLlamaDecoder(model, mask, ids.shape[1] + 1).prefill(ids, pos).float()
        return model(input_ids=ids, attention_mask=mask).logits[:, -1].float()


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp4_e2m1", "mxfp8"])
def test_both_decode_paths_quantise_the_same_activations(tiny_policy_dir, dtype):
    """The fast decoder and the model's own forward (hooks) quantise the same inputs. Run
    in float32 (the copy's FP8 weights are exact there) so that reordering noise is ~1e-6:
    the two paths agree to 1e-4, while activation quantisation itself moves the logits by
    far more (against the weights-only model)."""
    policy, tok = load_policy(tiny_policy_dir)
    ids = torch.tensor([tok.encode("12+7-3=9,6") for _ in range(2)])
    w8a8 = RolloutModel(policy, dtype)().float()
    w8 = RolloutModel(policy, dtype, fp8_activations=False)().float()
    fast, generic = last_logits(w8a8, ids, True), last_logits(w8a8, ids, False)
    assert (fast - generic).abs().max() < 1e-4
    assert (last_logits(w8, ids, True) - fast).abs().max() > 1e-3


@pytest.mark.parametrize("dtype", ["float16", "fp8_e4m3", "fp4_e2m1", "mxfp8"])
def test_the_mismatch_diagnostic_equals_a_float64_recompute(tiny_policy_dir, dtype):
    policy, tok = load_policy(tiny_policy_dir)
    r = rollout_gap(policy, tok, RolloutModel(policy, dtype)(), True)
    ids, mask = r.full_sequences()
    from lmpo.models.forward import forward_logprobs

    with torch.no_grad():
        fp32, _ = forward_logprobs(policy, ids, mask, r.response_ids, with_entropy=False)
        fp64, _ = forward_logprobs(policy.double(), ids, mask, r.response_ids,
                                   with_entropy=False)
    got = mismatch_metrics(r.logp, fp32, r.response_mask)
    gaps = sorted((r.logp.double() - fp64).abs()[r.response_mask.bool()].tolist())
    mean = sum(gaps) / len(gaps)
    pos = 0.99 * (len(gaps) - 1)  # linear interpolation between order statistics
    p99 = gaps[int(pos)] + (pos - int(pos)) * (gaps[min(int(pos) + 1, len(gaps) - 1)]
                                               - gaps[int(pos)])
    # the diagnostic reads a float32 recompute: it may differ from the float64 numbers by
    # the recompute's own error and no more (means and quantiles are 1-Lipschitz)
    err = (fp32.double() - fp64).abs()[r.response_mask.bool()]
    assert mean > 1e-4 and mean > 100 * float(err.mean())  # a real mismatch
    assert abs(got["rollout/logp_mismatch"] - mean) <= float(err.mean()) + 1e-12
    assert abs(got["rollout/logp_mismatch_p99"] - p99) <= float(err.max()) + 1e-12


def test_fp8_with_lora_is_refused_before_any_work(tiny_policy_dir):
    from lmpo.config import ConfigError, load_config
    from lmpo.trainer.train_config import TrainConfig

    with pytest.raises(ConfigError, match="fp8_e4m3 quantises the decoder's linear layers"):
        load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}",
                                          "rollout.dtype=fp8_e4m3", "lora.r=4"]).validate()


def test_random_rows_keep_their_sign_and_zero_rows_stay_zero():
    rng = random.Random(0)
    w = torch.tensor([[rng.uniform(-1, 1) for _ in range(8)] for _ in range(3)] + [[0.0] * 8])
    deq = fake_quant_e4m3(w, dim=1)
    assert torch.equal(deq[3], torch.zeros(8))
    assert ((deq[:3] == 0) | (deq[:3].sign() == w[:3].sign())).all()
