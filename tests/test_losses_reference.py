"""Every registered loss against its independent float64 reference
(`tests/loss_references/`): value and autograd gradient w.r.t. logp, on random inputs,
at the hyper-parameter sets each reference declares."""

from __future__ import annotations

import inspect

import pytest
import torch

from lmpo.losses import get_loss, list_losses, loss_hparams
from tests.loss_references import REFERENCES

CASES = {name: REFERENCES[name].cases if name in REFERENCES else [{}] for name in list_losses()}


def test_every_registered_loss_has_a_reference():
    missing = set(list_losses()) - set(REFERENCES)
    assert not missing, f"no float64 reference in tests/loss_references/ for {missing}"
    assert not set(REFERENCES) - set(list_losses()), "a reference for an unregistered loss"


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_a_reference_takes_its_losss_hyper_parameters_with_the_same_defaults(name):
    """The independent reference and the implementation agree on what each
    hyper-parameter is called and what it defaults to."""
    params = inspect.signature(REFERENCES[name].fn).parameters.values()
    ref = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert ref == loss_hparams(name)


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
    ref = REFERENCES[name]
    if ref.rows:
        rows = ref.fn(lp, olp, a, m, **hp)
    else:
        fn = ref.fn
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
