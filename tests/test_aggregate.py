"""`aggregate`: hand-computed values for each mode and exact gradient accumulation."""

from __future__ import annotations

import pytest
import torch

from lmpo.losses import AGG_MODES, aggregate, get_loss

D = torch.float64
L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], dtype=D)
M = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1]], dtype=D)


@pytest.mark.parametrize("mode,want", [
    ("token-mean", (1 + 2 + 7 + 8 + 9) / 5),
    ("token-sum", 27.0),
    ("seq-mean-token-mean", ((1 + 2) / 2 + (7 + 8 + 9) / 3) / 2),
    ("seq-mean-token-sum", (3 + 24) / 2),
    ("seq-mean-token-sum-norm", (3 + 24) / 2 / 3),
])
def test_hand_computed_defaults(mode, want):
    assert float(aggregate(L, M, mode)) == pytest.approx(want, rel=1e-12)


def test_explicit_counts_override_defaults_and_unused_ones_are_ignored():
    kw = {"num_tokens": 10, "num_seqs": 4, "horizon": 6}
    assert float(aggregate(L, M, "token-mean", **kw)) == pytest.approx(27 / 10)
    assert float(aggregate(L, M, "seq-mean-token-sum", **kw)) == pytest.approx(27 / 4)
    assert float(aggregate(L, M, "seq-mean-token-sum-norm", **kw)) == pytest.approx(27 / 24)
    assert float(aggregate(L, M, "seq-mean-token-mean", **kw)) == pytest.approx(9.5 / 4)


@pytest.mark.parametrize("mode", AGG_MODES)
def test_empty_mask_gives_zero(mode):
    out = aggregate(L, torch.zeros_like(M), mode)
    assert float(out) == 0.0


def test_errors_name_shapes_and_modes():
    with pytest.raises(ValueError, match=r"\(3, 3\).*\(3, 2\)"):
        aggregate(L, M[:, :2], "token-mean")
    with pytest.raises(ValueError, match="valid modes: token-mean"):
        aggregate(L, M, "tokenmean")


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("name", ["ppo_clip", "drpo", "gspo"])
def test_gradient_accumulation_is_exact(mode, name):
    """One batch of 8 == 8 micro-batches of 1 with the global counts passed in."""
    g = torch.Generator().manual_seed(7)
    b, t = 8, 6
    old = torch.log(torch.rand(b, t, generator=g, dtype=D) * 0.9 + 0.05)
    logp = (old + 0.3 * torch.randn(b, t, generator=g, dtype=D)).clamp(max=0)
    adv = torch.randn(b, generator=g, dtype=D)
    mask = (torch.rand(b, t, generator=g) < 0.7).double()
    mask[3] = 0.0
    fn = get_loss(name, **({"eps_low": 0.1, "eps_high": 0.1} if name == "gspo" else {}))
    counts = {"num_tokens": mask.sum(), "num_seqs": (mask.sum(-1) > 0).sum(), "horizon": t}

    full = logp.clone().requires_grad_(True)
    loss_full = aggregate(fn(full, old, adv, mask)[0], mask, mode)
    (g_full,) = torch.autograd.grad(loss_full, full)

    micro = logp.clone().requires_grad_(True)
    total = 0.0
    for i in range(b):
        s = slice(i, i + 1)
        part = aggregate(fn(micro[s], old[s], adv[s], mask[s])[0], mask[s], mode, **counts)
        part.backward()
        total += float(part.detach())
    assert total == pytest.approx(loss_full.item(), rel=1e-12, abs=1e-15)
    torch.testing.assert_close(micro.grad, g_full, rtol=1e-12, atol=1e-15)
