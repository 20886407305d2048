"""The properties each loss must prove (its docstring states the formula), one test each."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.losses import get_loss

D = torch.float64


def one_token(rho: float, a: float, old: float = math.log(0.3)):
    old_t = torch.tensor([[old]], dtype=D)
    logp = (old_t + rho).requires_grad_(True)
    return logp, old_t, torch.tensor([[a]], dtype=D), torch.ones(1, 1, dtype=D)


def loss_at(name, rho, a, **hp):
    logp, old, adv, mask = one_token(rho, a)
    return float(get_loss(name, **hp)(logp, old, adv, mask)[0].detach().sum())


def grad_at(name, rho, a, **hp):
    logp, old, adv, mask = one_token(rho, a)
    loss, _ = get_loss(name, **hp)(logp, old, adv, mask)
    return float(torch.autograd.grad(loss.sum(), logp)[0])


# ---------------------------------------------------------------- Output Reset


@pytest.mark.parametrize("a", [1.3, -0.7])
def test_or_gradient_is_continuous_at_the_margin(a):
    alpha, h = 0.2, 1e-6
    s = math.copysign(1.0, a)
    rho0 = s * alpha
    left = (loss_at("output_reset", rho0, a) - loss_at("output_reset", rho0 - h, a)) / h
    right = (loss_at("output_reset", rho0 + h, a) - loss_at("output_reset", rho0, a)) / h
    assert abs(left - right) < 1e-5  # both ~0: C^1
    assert abs(grad_at("output_reset", rho0 - s * 1e-3, a)) == pytest.approx(2e-3, rel=1e-6)
    # PPO-clip has a kink at its boundary: the same check tells them apart.
    b = 1.2 if a > 0 else 0.8
    rho_c = math.log(b)
    pl = (loss_at("ppo_clip", rho_c, a) - loss_at("ppo_clip", rho_c - h, a)) / h
    pr = (loss_at("ppo_clip", rho_c + h, a) - loss_at("ppo_clip", rho_c, a)) / h
    assert abs(pl - pr) > 0.5


@pytest.mark.parametrize("a", [2.0, 0.1, -0.5, -3.0])
def test_or_zero_gradient_past_margin_and_direction_is_sign_a(a):
    s = math.copysign(1.0, a)
    for past in (0.2 + 1e-9, 0.25, 1.0, 5.0):
        assert grad_at("output_reset", s * past, a) == 0.0
        assert loss_at("output_reset", s * past, a) == 0.0
    for before in (-1.0, 0.0, 0.1, 0.19):
        g = grad_at("output_reset", s * before, a)
        assert math.copysign(1.0, -g) == s  # a descent step moves rho toward sign(A)
        assert g == pytest.approx(-2 * s * (0.2 - before), rel=1e-9)  # |A| does not enter


def test_or_zero_advantage_contributes_nothing():
    for rho in (-2.0, 0.0, 0.1, 3.0):
        assert loss_at("output_reset", rho, 0.0) == 0.0
        assert grad_at("output_reset", rho, 0.0) == 0.0


# ---------------------------------------------------------------- CE-GPPO


def random_tokens(seed, n=400):
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(1, n, generator=g, dtype=D) * 0.9 + 0.05)
    logp = (old + 0.5 * torch.randn(1, n, generator=g, dtype=D)).clamp(max=0.0)
    adv = torch.randn(1, n, generator=g, dtype=D)
    return logp, old, adv, torch.ones(1, n, dtype=D)


def value_and_grad(name, batch, **hp):
    logp, old, adv, mask = batch
    logp = logp.clone().requires_grad_(True)
    loss, _ = get_loss(name, **hp)(logp, old, adv, mask)
    return loss.detach(), torch.autograd.grad(loss.sum(), logp)[0]


def test_cegppo_beta_zero_has_ppo_clip_gradient():
    batch = random_tokens(0)
    _, g_ce = value_and_grad("cegppo", batch, beta1=0.0, beta2=0.0)
    _, g_ppo = value_and_grad("ppo_clip", batch)
    torch.testing.assert_close(g_ce, g_ppo, rtol=0, atol=0)


def test_cegppo_beta_one_has_ppo_clip_forward_value():
    batch = random_tokens(1)
    v_ce, g_ce = value_and_grad("cegppo", batch, beta1=1.0, beta2=1.0)
    v_ppo, g_ppo = value_and_grad("ppo_clip", batch)
    torch.testing.assert_close(v_ce, v_ppo, rtol=1e-15, atol=0)
    assert (g_ce != g_ppo).any()  # but the clipped tokens now pass gradient


@pytest.mark.parametrize("beta1,beta2", [(0.5, 1.0), (0.0, 2.0), (1.7, 0.3)])
def test_cegppo_clipped_gradients_are_beta_scaled_and_unclipped_match_ppo(beta1, beta2):
    logp, old, adv, mask = batch = random_tokens(2)
    eps_low, eps_high = 0.2, 0.28
    hp = {"eps_low": eps_low, "eps_high": eps_high}
    _, g = value_and_grad("cegppo", batch, beta1=beta1, beta2=beta2, **hp)
    _, g_ppo = value_and_grad("ppo_clip", batch, **hp)
    r = torch.exp(logp - old)
    low = (r < 1 - eps_low) & (adv < 0)
    high = (r > 1 + eps_high) & (adv > 0)
    assert low.sum() > 10 and high.sum() > 10
    torch.testing.assert_close(g[low].abs(), beta1 * (1 - eps_low) * adv[low].abs(), rtol=1e-12,
                               atol=0)
    torch.testing.assert_close(g[high].abs(), beta2 * (1 + eps_high) * adv[high].abs(),
                               rtol=1e-12, atol=0)
    rest = ~(low | high)
    torch.testing.assert_close(g[rest], g_ppo[rest], rtol=0, atol=0)


# ---------------------------------------------------------------- DPPO


def probs_batch(p, q, a):
    logp = torch.log(torch.tensor([p], dtype=D)).requires_grad_(True)
    old = torch.log(torch.tensor([q], dtype=D))
    return logp, old, torch.tensor([a], dtype=D), torch.ones(1, len(p), dtype=D)


def test_dppo_tv_masks_exactly_the_named_tokens():
    #            A>0 up big, A>0 up small, A>0 down big, A<0 down big, A<0 down small, A<0 up big
    p = [0.70, 0.60, 0.10, 0.10, 0.45, 0.90]
    q = [0.50, 0.50, 0.50, 0.50, 0.50, 0.50]
    a = [1.00, 1.00, 1.00, -1.0, -1.00, -1.0]
    logp, old, adv, mask = probs_batch(p, q, a)
    loss, m = get_loss("dppo_tv")(logp, old, adv, mask)
    grad = torch.autograd.grad(loss.sum(), logp)[0][0]
    dropped = [g == 0 for g in grad.tolist()]
    assert dropped == [True, False, False, True, False, False]
    assert m["dppo/masked_frac"] == pytest.approx(2 / 6)


def test_dppo_kl_masks_exactly_the_named_tokens():
    p = [0.80, 0.52, 0.20, 0.20, 0.48, 0.95, 0.5]
    q = [0.50, 0.50, 0.50, 0.50, 0.50, 0.50, 0.5]
    a = [1.00, 1.00, 1.00, -1.0, -1.00, -1.0, 0.0]
    logp, old, adv, mask = probs_batch(p, q, a)
    loss, m = get_loss("dppo_kl", delta=0.05)(logp, old, adv, mask)
    grad = torch.autograd.grad(loss.sum(), logp)[0][0]
    # KL(0.5||0.8) = 0.223, KL(0.5||0.52) = 8e-4, KL(0.5||0.2) = 0.223
    assert [g == 0 for g in grad.tolist()] == [True, False, False, True, False, False, True]
    assert m["dppo/masked_frac"] == pytest.approx(2 / 7)  # the last one is A == 0, not masked


# ---------------------------------------------------------------- DRPO


@pytest.mark.parametrize("delta", [12.5, 0.3, 0.05])
def test_drpo_gradient_weight_equals_formula(delta):
    logp, old, adv, mask = batch = random_tokens(3)
    _, g = value_and_grad("drpo", batch, delta=delta)
    r = torch.exp(logp - old)
    p, q = torch.exp(logp), torch.exp(old)
    w = 1 - torch.sign(adv * (r - 1)) * (p - q).abs() / delta
    torch.testing.assert_close(g / (-adv * r), w, rtol=1e-10, atol=1e-12)
    _, m = get_loss("drpo", delta=delta)(*batch)
    assert m["drpo/weight_min"] == pytest.approx(float(w.min()), rel=1e-9)
    assert m["drpo/weight_max"] == pytest.approx(float(w.max()), rel=1e-9)


def test_drpo_default_delta_keeps_weights_near_one():
    # |p - q| <= 1 for any probabilities, so delta = 12.5 bounds |w - 1| by 0.08
    _, m = get_loss("drpo")(*random_tokens(4))
    assert 0.92 <= m["drpo/weight_min"] <= 1.0 <= m["drpo/weight_max"] <= 1.08


@pytest.mark.parametrize("p,q,a", [(0.62, 0.5, 1.0), (0.38, 0.5, -1.0)])
def test_drpo_turns_corrective_beyond_delta_where_dppo_is_zero(p, q, a):
    delta = 0.05  # |p - q| = 0.12 > delta, moved in the advantage's direction
    batch = probs_batch([p], [q], [a])
    g_drpo = torch.autograd.grad(get_loss("drpo", delta=delta)(*batch)[0].sum(), batch[0])[0]
    plain_pg = -a * p / q
    assert math.copysign(1, float(g_drpo)) == -math.copysign(1, plain_pg)
    batch = probs_batch([p], [q], [a])
    g_dppo = torch.autograd.grad(
        get_loss("dppo_tv", delta_low=delta, delta_high=delta)(*batch)[0].sum(), batch[0])[0]
    assert float(g_dppo) == 0.0
    # inside the region (|p - q| < delta) DRPO still pushes like plain PG
    batch = probs_batch([q + 0.5 * (p - q) / 6], [q], [a])
    g_in = torch.autograd.grad(get_loss("drpo", delta=delta)(*batch)[0].sum(), batch[0])[0]
    assert math.copysign(1, float(g_in)) == math.copysign(1, plain_pg)
