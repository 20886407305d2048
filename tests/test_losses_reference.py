"""Every registered loss against its independent float64 reference: value and
autograd gradient w.r.t. logp, on random inputs, several hyper-parameter sets."""

from __future__ import annotations

import pytest
import torch

from lmpo.losses import get_loss, list_losses
from tests.loss_reference import ROW_REFERENCES, TOKEN_REFERENCES

CASES = {
    "ppo_clip": [{}, {"eps_low": 0.1, "eps_high": 0.28}, {"clip_ratio_c": 1.5}],
    "gspo": [{}, {"eps_low": 0.05, "eps_high": 0.1}],
    "cispo": [{}, {"eps_low": 0.2, "eps_high": 0.28}],
    "reinforce": [{}],
    "output_reset": [{}, {"alpha": 0.5, "weight": "abs"}],
    "cegppo": [{}, {"beta1": 0.0, "beta2": 0.0}, {"beta1": 2.0, "beta2": 0.3, "eps_low": 0.1,
                                                   "eps_high": 0.3, "clip_ratio_c": 1.6}],
    "dppo_tv": [{}, {"delta_low": 0.05, "delta_high": 0.02, "clip_ratio_c": 1.2}],
    "dppo_kl": [{}, {"delta": 0.005, "clip_ratio_c": 1.1}],
    "drpo": [{}, {"delta": 0.05}],
}


def test_every_registered_loss_has_a_reference_test():
    covered = set(TOKEN_REFERENCES) | set(ROW_REFERENCES)
    assert set(list_losses()) <= covered, f"no reference for {set(list_losses()) - covered}"
    assert set(list_losses()) <= set(CASES), f"no cases for {set(list_losses()) - set(CASES)}"


def random_batch(seed: int, b: int = 6, t: int = 9, spread: float = 0.6):
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(b, t, generator=g, dtype=torch.float64) * 0.98 + 0.01)
    logp = (old + spread * torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=-1e-4)
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    adv[torch.rand(b, t, generator=g) < 0.15] = 0.0
    mask = (torch.rand(b, t, generator=g) < 0.8).double()
    mask[0] = 0.0  # a fully padded row
    return logp, old, adv, mask


def reference(name, hp, logp, old, adv, mask):
    lp, olp, a, m = (x.tolist() for x in (logp, old, adv, mask))
    if name in ROW_REFERENCES:
        rows = ROW_REFERENCES[name](lp, olp, a, m, **hp)
    else:
        fn = TOKEN_REFERENCES[name]
        rows = [[fn(lp[i][j], olp[i][j], a[i][j], **hp) if m[i][j] else (0.0, 0.0)
                 for j in range(len(lp[0]))] for i in range(len(lp))]
    value = torch.tensor([[v for v, _ in row] for row in rows], dtype=torch.float64)
    grad = torch.tensor([[g for _, g in row] for row in rows], dtype=torch.float64)
    return value, grad


@pytest.mark.parametrize(
    "name,hp", [(n, hp) for n, hps in CASES.items() for hp in hps],
    ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={x}" for k, x in v.items()),
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_value_and_gradient_match_reference(name, hp, seed):
    logp, old, adv, mask = random_batch(seed)
    logp.requires_grad_(True)
    loss_tok, metrics = get_loss(name, **hp)(logp, old, adv, mask)
    want_value, want_grad = reference(name, hp, logp.detach(), old, adv, mask)
    torch.testing.assert_close(loss_tok.detach(), want_value, rtol=1e-6, atol=1e-12)
    (grad,) = torch.autograd.grad(loss_tok.sum(), logp)
    torch.testing.assert_close(grad, want_grad, rtol=1e-6, atol=1e-12)
    assert all(isinstance(v, float) for v in metrics.values())


@pytest.mark.parametrize("name", ["ppo_clip", "cegppo", "cispo", "dppo_tv", "drpo"])
def test_advantage_of_shape_B_broadcasts_over_tokens(name):
    logp, old, adv, mask = random_batch(5)
    per_seq = adv[:, 0]
    fn = get_loss(name)
    a, _ = fn(logp, old, per_seq, mask)
    b, _ = fn(logp, old, per_seq[:, None].expand_as(logp), mask)
    torch.testing.assert_close(a, b, rtol=0, atol=0)
