"""VACO's sequence mask (`loss.seq_divergence_threshold`): the binary divergences and the
mask against a scalar float64 reference, its edge cases (no advantage, no mismatch, an
empty response, whole-response masking), a short run that logs it, and the engines'
refusals."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.losses import binary_divergence, sequence_divergence_mask

EPS = torch.finfo(torch.float64).eps


def divergence_ref(old: float, sampler: float, kind: str) -> float:
    p = min(max(math.exp(min(old, 0.0)), EPS), 1 - EPS)
    q = min(max(math.exp(min(sampler, 0.0)), EPS), 1 - EPS)
    if kind == "tv":
        return abs(q - p)
    return max(q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p)), 0.0)


def mask_ref(old, sampler, adv, mask, delta, kind, directional):
    keep = []
    for o, s, a, m in zip(old, sampler, adv, mask, strict=True):
        n = sum(m)
        div = sum(divergence_ref(x, y, kind) for x, y, v in zip(o, s, m, strict=True) if v)
        over = div / max(n, 1) > delta
        row = []
        for x, y, at, v in zip(o, s, a, m, strict=True):
            away = (x > y and at > 0) or (x < y and at < 0)
            row.append(0.0 if v and over and (away or not directional) else 1.0)
        keep.append(row)
    return keep


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 4), st.integers(1, 7), st.sampled_from(["tv", "kl"]), st.booleans(),
       st.floats(0.0, 0.3), st.integers(0, 2 ** 31 - 1))
def test_the_mask_equals_a_scalar_reference(b, t, kind, directional, delta, seed):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(b, t, generator=g, dtype=torch.float64) * 3
    sampler = old + torch.randn(b, t, generator=g, dtype=torch.float64) * 0.5
    adv = torch.randn(b, t, generator=g, dtype=torch.float64).round()  # zeros included
    mask = (torch.rand(b, t, generator=g) < 0.8).double()
    keep, metrics = sequence_divergence_mask(old, sampler, adv, mask, delta, kind, directional)
    want = mask_ref(old.tolist(), sampler.tolist(), adv.tolist(), mask.tolist(), delta, kind,
                    directional)
    assert keep.tolist() == want
    d = binary_divergence(old, sampler, kind)
    for i in range(b):
        for j in range(t):
            assert float(d[i, j]) == pytest.approx(
                divergence_ref(float(old[i, j]), float(sampler[i, j]), kind), rel=1e-12, abs=1e-15)
    valid = mask.bool()
    dropped = (keep == 0) & valid
    assert metrics["seq_divergence/masked_frac"] == pytest.approx(
        float(dropped.sum()) / max(int(valid.sum()), 1))


def test_the_edge_cases():
    old = torch.log(torch.tensor([[0.9, 0.5, 0.2], [0.3, 0.3, 0.3]], dtype=torch.float64))
    sampler = torch.log(torch.tensor([[0.5, 0.9, 0.6], [0.3, 0.3, 0.3]], dtype=torch.float64))
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    # row 0: TV 0.4 each, mean 0.4 > 0.1. Token 0 (pi_old above mu) with A > 0 moves away:
    # dropped; token 1 (below) with A > 0 moves back: kept; token 2 with A = 0: kept.
    # row 1: no mismatch (D = 0): kept whatever the advantage.
    adv = torch.tensor([[1.0, 1.0, 0.0], [5.0, -5.0, 5.0]], dtype=torch.float64)
    keep, m = sequence_divergence_mask(old, sampler, adv, mask, 0.1)
    assert keep.tolist() == [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    assert m["seq_divergence/seq_over_frac"] == 0.5
    assert m["seq_divergence/seq_div_mean"] == pytest.approx(0.2)
    whole, _ = sequence_divergence_mask(old, sampler, adv, mask, 0.1, directional=False)
    assert whole.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    # the same advantage per sequence ([B]) as per token
    # (A = -1: token 0 moves back toward mu and stays; tokens 1, 2 move away)
    per_seq, _ = sequence_divergence_mask(old, sampler, torch.tensor([-1.0, 5.0]), mask, 0.1)
    assert per_seq.tolist() == [[1.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    # at the threshold exactly: not over (strict); an empty response: kept, not counted
    at, _ = sequence_divergence_mask(old, sampler, adv, mask, 0.4)
    assert at.tolist() == [[1.0] * 3] * 2
    empty, m = sequence_divergence_mask(old, sampler, adv, torch.zeros_like(mask), 0.0)
    assert empty.tolist() == [[1.0] * 3] * 2 and m["seq_divergence/masked_frac"] == 0.0
    with pytest.raises(ValueError, match="unknown binary divergence 'js'; valid: tv, kl"):
        binary_divergence(old, sampler, "js")


def test_a_short_run_logs_the_mask_under_fp4_rollouts(tiny_policy_dir, tmp_path):
    """NVFP4 rollouts give pi_old != mu: at threshold 0, masking whole responses (the tiny
    policy's first advantages are all 0, which the directional mask keeps), tokens leave
    the loss; on a float32 sampler the recompute equals the sampler's log-probs and none
    does."""
    from lmpo.trainer.checkpoint import read_rows
    from lmpo.trainer.loop import train
    from tests.test_robustness import tiny

    fp4 = tiny(tiny_policy_dir, "steps=2", "rollout.dtype=fp4_e2m1", preset="vaco")
    fp4.loss.seq_divergence_threshold, fp4.loss.seq_divergence_directional = 0.0, False
    train(fp4, tmp_path / "fp4", progress=False)
    rows = read_rows(tmp_path / "fp4" / "metrics.jsonl")
    assert rows[0]["loss/seq_divergence/masked_frac"] > 0
    assert rows[0]["loss/seq_divergence/seq_div_mean"] > 0
    on = tiny(tiny_policy_dir, "steps=1", "loss.seq_divergence_directional=false", preset="vaco")
    train(on, tmp_path / "on", progress=False)
    assert read_rows(tmp_path / "on" / "metrics.jsonl")[0]["loss/seq_divergence/masked_frac"] == 0.0


def test_the_engines_refuse_it_by_name(tiny_policy_dir):
    from lmpo.experiments.engines.trl_mapping import trl_refusals
    from lmpo.experiments.engines.verl_launch import refusals
    from tests.test_robustness import tiny

    cfg = tiny(tiny_policy_dir, preset="vaco")
    assert any(x.startswith("loss.seq_divergence_threshold=0.05: TRL has no VACO") for x in
               trl_refusals(cfg))
    assert any(x.startswith("loss.seq_divergence_threshold=0.05: verl 0.9.1 has no VACO")
               for x in refusals(cfg))
