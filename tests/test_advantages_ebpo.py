"""EBPO: Welford state, shrinkage, the all-fail property, round trips, Monte Carlo."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lmpo.advantages import EBPO, get_advantage
from lmpo.advantages.ebpo import shrinkage_monte_carlo

D = torch.float64


def test_hand_computed_two_calls():
    est = get_advantage("ebpo", standardize=False)
    # call 1: rewards [1, 0 | 1, 1]; mu = 0.75, sigma2 = 0.1875; group means [0.5, 1], tau2 = 0.0625
    adv, m = est(torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=D), torch.tensor([0, 0, 1, 1]))
    s = (0.1875 / 2) / (0.1875 / 2 + 0.0625)
    v0, v1 = (1 - s) * 0.5 + s * 0.75, (1 - s) * 1.0 + s * 0.75
    torch.testing.assert_close(adv, torch.tensor([1 - v0, -v0, 1 - v1, 1 - v1], dtype=D))
    assert m["ebpo/shrinkage"] == pytest.approx(s) and m["ebpo/mu_glob"] == 0.75
    assert m["ebpo/sigma2"] == pytest.approx(0.1875) and m["ebpo/tau2"] == pytest.approx(0.0625)
    # call 2: an all-fail group of 3 and a single response: unequal sizes use their own G
    adv, m = est(torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=D), torch.tensor([5, 5, 5, 9]))
    allr = np.array([1, 0, 1, 1, 0, 0, 0, 1.0])
    gm = np.array([0.5, 1.0, 0.0, 1.0])
    mu, sig2, tau2 = allr.mean(), allr.var(), gm.var()
    s3, s1 = (sig2 / 3) / (sig2 / 3 + tau2), sig2 / (sig2 + tau2)
    want = [-(s3 * mu)] * 3 + [1 - ((1 - s1) * 1.0 + s1 * mu)]
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)


def test_standardised_advantage_is_batch_whitened_raw():
    scores, gid = torch.tensor([1.0, 0, 0, 0, 1, 1], dtype=D), torch.tensor([0, 0, 1, 1, 2, 2])
    raw, _ = get_advantage("ebpo", standardize=False)(scores, gid)
    adv, _ = get_advantage("ebpo")(scores, gid)
    want = (raw - raw.mean()) / (raw.std(unbiased=True) + 1e-6)
    torch.testing.assert_close(adv, want, rtol=1e-12, atol=1e-12)


def test_welford_equals_numpy_over_everything_seen():
    rng = np.random.default_rng(0)
    est = EBPO()
    seen, means = [], []
    for _ in range(30):
        q = int(rng.integers(1, 6))
        sizes = rng.integers(1, 5, size=q)
        gid = np.repeat(np.arange(q), sizes)
        scores = rng.normal(size=len(gid)) * rng.random()
        est(torch.tensor(scores), torch.tensor(gid))
        seen.extend(scores)
        means.extend(scores[gid == k].mean() for k in range(q))
        assert est.rewards.n == len(seen) and est.group_means.n == len(means)
        assert est.rewards.mean == pytest.approx(np.mean(seen), rel=1e-12, abs=1e-14)
        assert est.rewards.var == pytest.approx(np.var(seen), rel=1e-10)
        assert est.group_means.var == pytest.approx(np.var(means), rel=1e-10)


def warmed(mu_target=0.6, seed=0) -> EBPO:
    est = EBPO(standardize=False)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        est(torch.tensor((rng.random(16) < mu_target).astype(float)), torch.arange(16) // 4)
    return est


def test_all_fail_group_gets_negative_advantage_while_grpo_gives_zero():
    scores = torch.tensor([0.0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 0, 1], dtype=D)
    gid = torch.arange(12) // 4
    est = warmed()
    adv, m = est(scores, gid)
    assert m["ebpo/mu_glob"] > 0 and (adv[:4] < 0).all()
    grpo, _ = get_advantage("grpo")(scores, gid)
    assert (grpo[:4] == 0).all()
    std_est = EBPO()
    std_est.load_state_dict(warmed().state_dict())
    adv_std, _ = std_est(scores, gid)  # batch-standardised: still negative in this mixed batch
    assert (adv_std[:4] < 0).all()


def test_failing_an_easy_prompt_costs_more_than_failing_a_hard_one():
    est = warmed()
    # group 0 easy (3 of 4 solved), group 1 hard (1 of 4 solved); index 3 and 4 fail
    scores = torch.tensor([1.0, 1, 1, 0, 0, 0, 0, 1], dtype=D)
    adv, _ = est(scores, torch.arange(8) // 4)
    assert adv[3] < adv[4] < 0


def test_state_round_trip_is_exact():
    a = warmed(seed=3)
    b = EBPO(standardize=False)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    rng = np.random.default_rng(9)
    for _ in range(4):
        scores = torch.tensor((rng.random(12) < 0.4).astype(float))
        gid = torch.arange(12) // 3
        adv_a, m_a = a(scores, gid)
        adv_b, m_b = b(scores, gid)
        assert torch.equal(adv_a, adv_b) and m_a == m_b


def test_first_call_with_constant_rewards_is_finite():
    adv, m = EBPO()(torch.ones(4, dtype=D), torch.tensor([0, 0, 1, 1]))
    assert torch.isfinite(adv).all() and m["ebpo/shrinkage"] == 0.0


@pytest.mark.parametrize("group_size", [2, 4])
def test_monte_carlo_shrinkage_beats_the_group_mean(group_size):
    """theta_q ~ N(0.5, 0.2^2) clipped to [0, 1], rewards ~ Bernoulli(theta_q),
    3000 prompts in batches of 16. Observed (seed 0): G=2 MSE(V_EB) 0.0390 vs
    MSE(group mean) 0.1074 (ratio 0.36); G=4 0.0259 vs 0.0528 (0.49); G=8 0.0161
    vs 0.0264 (0.61). Asserting ratio < 0.7 fails if the shrinkage is dropped
    (S = 0 gives exactly 1) or badly mis-scaled."""
    mse_eb, mse_mean = shrinkage_monte_carlo(group_size, prompts=3000, seed=0)
    assert mse_eb < 0.7 * mse_mean
