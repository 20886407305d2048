"""Property tests over every registered loss: finite values and gradients, exact
zeros on padding, for random shapes, all-padded rows, |rho| up to 50 and A == 0."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from lmpo.losses import AGG_MODES, aggregate, get_loss, list_losses, loss_meta


@st.composite
def loss_inputs(draw):
    b = draw(st.integers(1, 5))
    t = draw(st.integers(1, 7))
    seed = draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    rng = np.random.default_rng(seed)
    old = -rng.uniform(0, 50, size=(b, t))
    logp = -rng.uniform(0, 50, size=(b, t))  # |rho| up to 50 either way
    near = rng.random((b, t)) < 0.5
    logp[near] = np.minimum(old[near] + rng.normal(0, 0.3, size=near.sum()), 0.0)
    adv = rng.normal(0, 3, size=(b, t)) * (rng.random((b, t)) < 0.7)  # many exact zeros
    mask = rng.random((b, t)) < 0.6
    mask[rng.random(b) < 0.3] = False  # all-zero rows
    garbage = draw(st.sampled_from([0.0, float("-inf"), float("nan"), 1e30]))
    logp[~mask] = garbage  # padding holds anything
    as_t = lambda x: torch.tensor(x, dtype=dtype)  # noqa: E731
    return as_t(logp), as_t(old), as_t(adv), torch.tensor(mask)


@given(inputs=loss_inputs(), name=st.sampled_from(list_losses()),
       mode=st.sampled_from(AGG_MODES))
def test_losses_are_finite_and_zero_on_padding(inputs, name, mode):
    logp, old, adv, mask = inputs
    logp = logp.clone().requires_grad_(True)
    loss_tok, metrics = get_loss(name)(logp, old, adv, mask)
    assert loss_tok.shape == logp.shape
    assert torch.isfinite(loss_tok).all()
    assert (loss_tok[~mask] == 0).all()
    loss = aggregate(loss_tok, mask, mode)
    (grad,) = torch.autograd.grad(loss, logp)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    assert (grad[~mask] == 0).all()
    assert all(np.isfinite(v) for v in metrics.values()), metrics


@given(inputs=loss_inputs(), name=st.sampled_from(list_losses()))
def test_zero_advantage_gives_zero_loss_gradient(inputs, name):
    """A loss with a term acting whatever the advantage (loss metadata
    `acts_without_advantage`: DRO's penalty, KL-Cov's |rho|) is inert only at rho = 0."""
    logp, old, _, mask = inputs
    if loss_meta(name)["acts_without_advantage"]:
        logp = torch.where(mask, old, logp)
    logp = logp.clone().requires_grad_(True)
    loss_tok, _ = get_loss(name)(logp, old, torch.zeros_like(old), mask)
    (grad,) = torch.autograd.grad(loss_tok.sum(), logp)
    assert (grad == 0).all()
