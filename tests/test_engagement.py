"""The engagement diagnostics against hand-computed values: CE-GPPO's share of the gradient
mass in its beta regions, DRPO's share of tokens whose weight moved by more than 0.1, the
group estimators' all-fail / all-success / mixed groups."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.advantages import get_advantage
from lmpo.losses import get_loss, loss_meta


def tokens(ratios, advs, mask=None, old=0.5):
    """One row: old_logp = log(old), logp = log(old * r)."""
    r = torch.tensor([ratios], dtype=torch.float64)
    old_logp = torch.full_like(r, math.log(old))
    logp = (old_logp + torch.log(r)).requires_grad_(True)
    mask = torch.tensor([mask or [1.0] * len(ratios)], dtype=torch.float64)
    return logp, old_logp, torch.tensor([advs], dtype=torch.float64), mask


def test_cegppos_beta_regions_share_of_the_gradient_mass():
    """Unclipped (r 1, A 1): |dL/dlogp| = 1; NA&LP (r 0.5, A -1): beta1 (1 - 0.2) = 0.4;
    PA&LP (r 1.5, A 2): beta2 (1 + 0.2) 2 = 2.4; a masked token counts nothing. The share
    is 2.8 / 3.8, and autograd's gradient agrees token by token."""
    logp, old, adv, mask = tokens([1.0, 0.5, 1.5, 1.5], [1.0, -1.0, 2.0, 5.0],
                                  [1.0, 1.0, 1.0, 0.0])
    loss_tok, m = get_loss("cegppo", beta1=0.5, beta2=1.0)(logp, old, adv, mask)
    assert m["cegppo/beta_grad_frac"] == pytest.approx(2.8 / 3.8, rel=1e-12)
    (grad,) = torch.autograd.grad(loss_tok.sum(), logp)
    assert grad.abs()[0].tolist() == pytest.approx([1.0, 0.4, 2.4, 0.0], rel=1e-12)
    _, off = get_loss("cegppo", beta1=0.0, beta2=0.0)(logp, old, adv, mask)
    assert off["cegppo/beta_grad_frac"] == 0.0  # PPO-clip's gradient: nothing there
    _, none = get_loss("cegppo")(logp, old, torch.zeros_like(adv), mask)
    assert none["cegppo/beta_grad_frac"] == 0.0  # no advantage, no mass, no NaN
    assert loss_meta("cegppo")["engagement"] == "loss/cegppo/beta_grad_frac"


def test_drpos_share_of_tokens_whose_weight_moved_more_than_0_1():
    """delta 0.25, q = 0.5: |w - 1| = |p - q| / delta. p = 0.6 (A > 0): 0.4, counted;
    p = 0.51: 0.04, not; p = 0.6 with A = 0: w = 1, not; a masked token, not: 1 / 3."""
    logp, old, adv, mask = tokens([1.2, 1.02, 1.2, 1.2], [1.0, 1.0, 0.0, 1.0],
                                  [1.0, 1.0, 1.0, 0.0])
    _, m = get_loss("drpo", delta=0.25)(logp, old, adv, mask)
    assert m["drpo/deviated_frac"] == pytest.approx(1 / 3, rel=1e-12)
    assert m["drpo/weight_dev_max"] == pytest.approx(0.4, rel=1e-9)
    _, published = get_loss("drpo")(logp, old, adv, mask)  # delta 12.5: |w - 1| <= 0.008
    assert published["drpo/deviated_frac"] == 0.0


@pytest.mark.parametrize("name", ["grpo", "ebpo", "rloo", "dr_grpo"])
def test_group_types_and_their_mean_advantage(name):
    """Groups [0, 0] all-fail, [1, 1] all-success, [0, 1] and [0.5, 0.5] mixed."""
    scores = torch.tensor([0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.5, 0.5])
    gids = torch.arange(8) // 2
    adv, m = get_advantage(name)(scores, gids)
    assert (m["adv/allfail_frac"], m["adv/allsuccess_frac"], m["adv/mixed_frac"]) == (
        0.25, 0.25, 0.5)
    a = adv.double()  # returned as float32; the metrics are the float64 means
    assert m["adv/allfail_mean"] == pytest.approx(float(a[:2].mean()), rel=1e-6)
    assert m["adv/allsuccess_mean"] == pytest.approx(float(a[2:4].mean()), rel=1e-6)
    assert m["adv/mixed_mean"] == pytest.approx(float(a[4:].mean()), rel=1e-6, abs=1e-9)
    if name == "ebpo":  # EBPO's point: an all-fail group still gets A < 0
        assert m["adv/allfail_mean"] < 0
    else:
        assert m["adv/allfail_mean"] == 0.0


def test_pm1_rewards_count_minus_one_as_failure():
    adv, m = get_advantage("ebpo")(torch.tensor([-1.0, -1.0, 1.0, -1.0]), torch.arange(4) // 2)
    assert m["adv/allfail_frac"] == 0.5 and m["adv/mixed_frac"] == 0.5
