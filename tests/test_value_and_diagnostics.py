"""The critic's loss and the displacement / OR diagnostics every ratio loss reports,
against element-wise float64 references."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.losses import OR_MARGIN, displacement_metrics, get_loss, list_losses, value_loss

D = torch.float64


def test_value_loss_hand_computed():
    v = torch.tensor([[1.0, 0.5, 2.0, 9.0]], dtype=D, requires_grad=True)
    old = torch.tensor([[0.8, 0.5, 1.0, 0.0]], dtype=D)
    ret = torch.tensor([[0.0, 1.0, 1.5, 0.0]], dtype=D)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=D)
    loss, m = value_loss(v, old, ret, mask, clip=0.2)
    # token 0: (1-0)^2 = 1 vs (0.8+0.2-0)^2 = 1 -> 0.5; token 1: 0.25 vs 0.25 -> 0.125;
    # token 2: (2-1.5)^2 = 0.25 vs (1.2-1.5)^2 = 0.09 -> 0.125; token 3 padded -> 0
    torch.testing.assert_close(loss, torch.tensor([[0.5, 0.125, 0.125, 0.0]], dtype=D))
    assert m["value/clipfrac"] == 0.0
    loss.sum().backward()
    # grads: token 0 ties (max takes the unclipped branch's gradient: v - R = 1);
    # token 2: unclipped branch, v - R = 0.5
    assert v.grad[0, 2] == pytest.approx(0.5) and v.grad[0, 3] == 0


@pytest.mark.parametrize("clip", [None, 0.1, 0.5])
def test_value_loss_equals_elementwise_reference(clip):
    g = torch.Generator().manual_seed(0)
    v, old, ret = (torch.randn(5, 7, generator=g, dtype=D) for _ in range(3))
    mask = (torch.rand(5, 7, generator=g) > 0.3).to(D)
    loss, m = value_loss(v, old, ret, mask, clip=clip)
    took = 0
    for i in range(5):
        for t in range(7):
            e = (float(v[i, t]) - float(ret[i, t])) ** 2
            if clip is not None:
                vc = float(old[i, t]) + max(-clip, min(clip, float(v[i, t] - old[i, t])))
                ec = (vc - float(ret[i, t])) ** 2
                took += int(ec > e and mask[i, t] > 0)
                e = max(e, ec)
            want = 0.5 * e if mask[i, t] > 0 else 0.0
            assert float(loss[i, t]) == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert m["value/clipfrac"] == pytest.approx(took / float(mask.sum()))


def test_value_loss_errors():
    with pytest.raises(ValueError, match="equal shapes"):
        value_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match="clip must be > 0"):
        value_loss(*(torch.zeros(1, 1),) * 4, clip=0.0)


def reference_diagnostics(rho, adv, mask, alpha):
    tok, seqs, res, over = [], [], [], []
    for i in range(rho.shape[0]):
        row = [abs(float(rho[i, t])) for t in range(rho.shape[1]) if mask[i, t] > 0]
        tok += row
        if row:
            seqs.append(sum(row))
        for t in range(rho.shape[1]):
            a = float(adv[i, t])
            if mask[i, t] > 0 and a != 0:
                m = math.copysign(1.0, a) * float(rho[i, t])
                res.append(max(0.0, alpha - m) ** 2)
                over.append(float(m >= alpha))

    def mean(x):
        return sum(x) / len(x) if x else 0.0

    return {"displacement": mean(tok), "displacement_seq": mean(seqs),
            "or/residual": mean(res), "or/overshoot_frac": mean(over)}


@pytest.mark.parametrize("alpha", [OR_MARGIN, 0.05])
def test_displacement_metrics_equal_elementwise_reference(alpha):
    g = torch.Generator().manual_seed(1)
    rho = torch.randn(6, 5, generator=g, dtype=D) * 0.4
    adv = torch.randn(6, 5, generator=g, dtype=D)
    adv[0] = 0.0
    mask = (torch.rand(6, 5, generator=g) > 0.3).to(D)
    mask[2] = 0
    got = displacement_metrics(rho, adv, mask, alpha)
    want = reference_diagnostics(rho, adv, mask, alpha)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k


@pytest.mark.parametrize("name", list_losses())
def test_every_loss_reports_the_comparable_diagnostics(name):
    g = torch.Generator().manual_seed(2)
    old = -torch.rand(3, 4, generator=g, dtype=D) - 0.1
    logp = old + torch.randn(3, 4, generator=g, dtype=D) * 0.3
    adv = torch.tensor([1.0, -2.0, 0.0], dtype=D)
    mask = torch.ones(3, 4, dtype=D)
    _, m = get_loss(name)(logp, old, adv, mask)
    want = reference_diagnostics((logp - old), adv[:, None].expand(3, 4), mask, OR_MARGIN)
    for k in ("displacement", "displacement_seq"):
        assert m[k] == pytest.approx(want[k], rel=1e-12), (name, k)
    # Output Reset reports or/* with its own margin, the comparable one at its defaults
    assert m["or/residual"] == pytest.approx(want["or/residual"], rel=1e-12)
    assert m["or/overshoot_frac"] == pytest.approx(want["or/overshoot_frac"], rel=1e-12)
