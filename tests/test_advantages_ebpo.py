"""EBPO as docs/decisions.md ("EBPO") states it: statistics against numpy over everything seen,
the all-fail property in the default config, the prior, per-cluster priors, decay,
edge cases, round trips and a Monte Carlo check against the oracle shrinkage."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from lmpo.advantages import EBPO, advantage_meta, get_advantage
from lmpo.advantages.ebpo import shrinkage_monte_carlo

# the float64 references of these estimators live here (tests/test_advantage_references.py
# reads this line): a running prior, checked over calls against numpy
ESTIMATOR_REFERENCES = ("ebpo",)

D = torch.float64


def reference(history, *, prior="global", decay=None, scale="global", eps=1e-6):
    """An independent numpy EBPO: every batch ever seen, weighted decay**age, then the
    estimator's formulas for the last batch. history: list of (scores, gids, clusters)."""
    n_hist = len(history)
    w_r, r_all, c_r = [], [], []  # per reward: weight, value, cluster
    w_g, m_g, inv_g, c_g = [], [], [], []  # per group: weight, mean, 1/G, cluster
    ss, df = 0.0, 0.0
    for j, (scores, gids, clusters) in enumerate(history):
        w = 1.0 if decay is None else decay ** (n_hist - 1 - j)
        scores, gids = np.asarray(scores, float), np.asarray(gids)
        for q in dict.fromkeys(gids.tolist()):
            members = scores[gids == q]
            ss += w * ((members - members.mean()) ** 2).sum()
            df += w * (len(members) - 1)
            w_g.append(w)
            m_g.append(members.mean())
            inv_g.append(1 / len(members))
            c_g.append(clusters[int(np.flatnonzero(gids == q)[0])] if clusters else "*")
        w_r += [w] * len(scores)
        r_all += scores.tolist()
        c_r += list(clusters) if clusters else ["*"] * len(scores)
    w_r, r_all, w_g, m_g, inv_g = map(np.asarray, (w_r, r_all, w_g, m_g, inv_g))
    c_r, c_g = np.asarray(c_r), np.asarray(c_g)

    def wmean(x, w):
        return (w * x).sum() / w.sum()

    def wvar(x, w):
        return wmean((x - wmean(x, w)) ** 2, w)

    sigma2 = ss / df if df > 0 else 0.0
    mu_all, var_all = wmean(r_all, w_r), wvar(r_all, w_r)

    def prior_of(c):
        if prior == "global":
            sel_r, sel_g = np.ones(len(r_all), bool), np.ones(len(m_g), bool)
        else:
            sel_r, sel_g = c_r == c, c_g == c
        mu = wmean(r_all[sel_r], w_r[sel_r])
        tau2 = max(0.0, wvar(m_g[sel_g], w_g[sel_g]) - sigma2 * wmean(inv_g[sel_g], w_g[sel_g]))
        return mu, tau2

    scores, gids, clusters = history[-1]
    scores, gids = np.asarray(scores, float), np.asarray(gids)
    adv = np.zeros(len(scores))
    for q in dict.fromkeys(gids.tolist()):
        sel = gids == q
        g = sel.sum()
        mu, tau2 = prior_of(clusters[int(np.flatnonzero(sel)[0])] if clusters else "*")
        s = 0.0 if sigma2 == 0 else (sigma2 / g) / (sigma2 / g + tau2)
        v = (1 - s) * scores[sel].mean() + s * mu
        adv[sel] = scores[sel] - v
    if scale == "global":
        adv = adv / (math.sqrt(var_all) + eps)
    return adv, {"mu_glob": mu_all, "sigma2": sigma2, "tau2": prior_of("*")[1]
                 if prior == "global" else None, "var_all": var_all}


def random_batch(rng, clusters=("easy", "hard")):
    q = int(rng.integers(1, 6))
    sizes = rng.integers(1, 5, size=q)  # unequal sizes, singletons included
    gids = np.repeat(rng.permutation(100)[:q], sizes)
    names = [str(rng.choice(clusters)) for _ in range(q)]
    tiers = [names[k] for k, n in enumerate(sizes) for _ in range(n)]
    scores = (rng.random(len(gids)) < rng.random()).astype(float)
    if rng.random() < 0.3:
        scores = rng.random(len(gids))  # partial credit too
    return scores, gids, tiers


@pytest.mark.parametrize("prior,decay,scale", [("global", None, "global"),
                                               ("global", 0.9, "none"),
                                               ("cluster", None, "global"),
                                               ("cluster", 0.8, "global")])
def test_statistics_and_advantages_equal_numpy_over_everything_seen(prior, decay, scale):
    rng = np.random.default_rng(0)
    est = get_advantage("ebpo", prior=prior, decay=decay, scale=scale)
    history = []
    for _ in range(25):
        scores, gids, tiers = random_batch(rng)
        history.append((scores, gids, tiers))
        adv, m = est(torch.tensor(scores, dtype=D), torch.tensor(gids), clusters=tiers)
        want, stats = reference(history, prior=prior, decay=decay, scale=scale)
        np.testing.assert_allclose(adv.numpy(), want, rtol=1e-9, atol=1e-12)
        assert m["ebpo/mu_glob"] == pytest.approx(stats["mu_glob"], rel=1e-10, abs=1e-14)
        assert m["ebpo/sigma2"] == pytest.approx(stats["sigma2"], rel=1e-10, abs=1e-14)
        assert est.var_all == pytest.approx(stats["var_all"], rel=1e-10, abs=1e-14)
        if stats["tau2"] is not None:
            assert m["ebpo/tau2"] == pytest.approx(stats["tau2"], rel=1e-9, abs=1e-12)


def test_hand_computed_two_calls():
    est = get_advantage("ebpo", scale="none")
    # call 1: [1, 0 | 1, 1]: mu 0.75; within SS 0.5 over df 2 -> sigma2 0.25;
    # group means [0.5, 1] var 0.0625 - 0.25 * mean(1/2) < 0 -> tau2 0 -> S = 1: V = mu
    adv, m = est(torch.tensor([1.0, 0.0, 1.0, 1.0], dtype=D), torch.tensor([0, 0, 1, 1]))
    torch.testing.assert_close(adv, torch.tensor([0.25, -0.75, 0.25, 0.25], dtype=D))
    assert (m["ebpo/sigma2"], m["ebpo/tau2"], m["ebpo/shrinkage"]) == (0.25, 0.0, 1.0)
    # call 2: [0, 0 | 1, 1 | 1, 1]: mu 7/10; SS 0.5 over df 5 -> sigma2 0.1;
    # means [0.5, 1, 0, 1, 1] var 0.16, mean 1/G 0.5 -> tau2 = 0.16 - 0.05 = 0.11
    adv, m = est(torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 1.0], dtype=D),
                 torch.tensor([0, 0, 1, 1, 2, 2]))
    s = 0.05 / (0.05 + 0.11)
    v_fail, v_pass = s * 0.7, (1 - s) + s * 0.7
    want = torch.tensor([-v_fail] * 2 + [1 - v_pass] * 4, dtype=D)
    torch.testing.assert_close(adv, want, rtol=1e-12, atol=1e-12)
    assert m["ebpo/tau2"] == pytest.approx(0.11) and m["ebpo/shrinkage"] == pytest.approx(s)


def warmed(mu_target=0.6, seed=0, **kw) -> EBPO:
    est = EBPO(**kw)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        est(torch.tensor((rng.random(16) < mu_target).astype(float)), torch.arange(16) // 4)
    return est


def test_all_fail_group_gets_negative_advantage_in_the_default_config():
    scores = torch.tensor([0.0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 0, 1], dtype=D)
    gid = torch.arange(12) // 4
    est = warmed()  # default: scale="global", prior="global", no batch mean subtracted
    adv, m = est(scores, gid)
    assert m["ebpo/mu_glob"] > 0 and m["ebpo/sigma2"] > 0 and (adv[:4] < 0).all()
    grpo, _ = get_advantage("grpo")(scores, gid)
    assert (grpo[:4] == 0).all()


def test_a_batch_in_which_every_group_fails_still_gets_a_gradient():
    est = warmed()
    mu_before = est.mu_glob
    adv, m = est(torch.zeros(8, dtype=D), torch.arange(8) // 4)
    assert mu_before > 0 and (adv < 0).all()
    # A = -S * mu_glob / scale with the statistics after this batch
    want = -m["ebpo/shrinkage"] * m["ebpo/mu_glob"] / m["ebpo/scale"]
    torch.testing.assert_close(adv, torch.full((8,), want, dtype=D), rtol=1e-12, atol=0)
    grpo, _ = get_advantage("grpo")(torch.zeros(8, dtype=D), torch.arange(8) // 4)
    assert (grpo == 0).all()


def test_an_all_fail_first_batch_has_nothing_to_shrink_toward():
    adv, m = EBPO()(torch.zeros(8, dtype=D), torch.arange(8) // 4)
    assert torch.equal(adv, torch.zeros(8, dtype=D))
    assert m["ebpo/mu_glob"] == 0 and m["ebpo/sigma2"] == 0 and m["ebpo/shrinkage"] == 0


def test_only_singletons_seen_means_no_within_variance_yet():
    est = EBPO()
    adv, m = est(torch.tensor([1.0, 0.0, 1.0], dtype=D), torch.tensor([0, 1, 2]))
    assert m["ebpo/sigma2"] == 0 and torch.equal(adv, torch.zeros(3, dtype=D))
    # a group of two brings sigma2 > 0: a singleton now shrinks toward mu_glob,
    # A = S (r - mu) / scale, unlike GRPO's 0
    adv, m = est(torch.tensor([1.0, 0.0, 1.0], dtype=D), torch.tensor([0, 0, 1]))
    sigma2, tau2 = m["ebpo/sigma2"], m["ebpo/tau2"]
    s1 = sigma2 / (sigma2 + tau2)
    assert sigma2 > 0 and adv[2] == pytest.approx(s1 * (1 - m["ebpo/mu_glob"]) / m["ebpo/scale"])


def test_constant_groups_have_zero_sigma2_and_no_shrinkage():
    adv, m = EBPO()(torch.tensor([1.0, 1, 0, 0], dtype=D), torch.tensor([0, 0, 1, 1]))
    assert m["ebpo/sigma2"] == 0 and m["ebpo/tau2"] > 0 and m["ebpo/shrinkage"] == 0
    assert torch.equal(adv, torch.zeros(4, dtype=D))


def test_mu_glob_matters():
    batch, gid = torch.tensor([0.0, 0, 1, 0], dtype=D), torch.tensor([0, 0, 1, 1])
    low, high = warmed(0.1), warmed(0.9)
    adv_low, m_low = low(batch, gid)
    adv_high, m_high = high(batch, gid)
    assert m_low["ebpo/mu_glob"] < 0.3 < 0.7 < m_high["ebpo/mu_glob"]
    assert adv_high[0] < adv_low[0] <= 0  # failing costs more where success is the norm


def test_per_cluster_priors_order_the_penalty():
    """prior="cluster": failing a prompt of a high-success cluster costs more than failing
    one of a low-success cluster; with one global prior both cost the same."""
    rng = np.random.default_rng(1)
    results, metrics = {}, {}
    for prior in ("cluster", "global"):
        est = EBPO(prior=prior)
        for _ in range(20):
            easy = (rng.random(8) < 0.9).astype(float)
            hard = (rng.random(8) < 0.15).astype(float)
            est(torch.tensor(np.concatenate([easy, hard])), torch.arange(16) // 4,
                clusters=["easy"] * 8 + ["hard"] * 8)
        results[prior], metrics[prior] = est(torch.zeros(8, dtype=D), torch.arange(8) // 4,
                                             clusters=["easy"] * 4 + ["hard"] * 4)
    adv, m = results["cluster"], metrics["cluster"]
    assert m["ebpo/mu_glob/easy"] > m["ebpo/mu_glob/hard"]
    assert adv[0] < adv[4] < 0
    assert results["global"][0] == results["global"][4] < 0


def test_decay_lets_the_prior_follow_a_curriculum():
    """Easy cluster first, then a hard one: with decay mu_glob tracks the current
    cluster; without it the history of the easy cluster dominates."""
    plain, forgetful = EBPO(), EBPO(decay=0.8)
    rng = np.random.default_rng(2)
    for level in [0.9] * 15 + [0.1] * 15:
        batch = torch.tensor((rng.random(16) < level).astype(float))
        plain(batch, torch.arange(16) // 4)
        forgetful(batch, torch.arange(16) // 4)
    assert abs(forgetful.mu_glob - 0.1) < 0.1 < 0.3 < plain.mu_glob


def test_state_round_trip_is_exact_with_clusters_and_decay():
    a = EBPO(prior="cluster", decay=0.9)
    rng = np.random.default_rng(3)
    batches = [random_batch(rng) for _ in range(8)]
    for scores, gids, tiers in batches[:4]:
        a(torch.tensor(scores), torch.tensor(gids), clusters=tiers)
    b = EBPO(prior="cluster", decay=0.9)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    for scores, gids, tiers in batches[4:]:
        adv_a, m_a = a(torch.tensor(scores), torch.tensor(gids), clusters=tiers)
        adv_b, m_b = b(torch.tensor(scores), torch.tensor(gids), clusters=tiers)
        assert torch.equal(adv_a, adv_b) and m_a == m_b


def test_clusters_are_metadata_and_errors_are_clear():
    assert advantage_meta("ebpo")["wants_clusters"]
    with pytest.raises(ValueError, match="needs clusters="):
        EBPO(prior="cluster")(torch.zeros(2), torch.tensor([0, 0]))
    with pytest.raises(ValueError, match="spans clusters 'a' and 'b'"):
        EBPO()(torch.zeros(2), torch.tensor([0, 0]), clusters=["a", "b"])
    for kw, msg in [({"decay": 1.0}, "decay"), ({"scale": "batch"}, "scale"),
                    ({"prior": "tier"}, "prior")]:
        with pytest.raises(ValueError, match=msg):
            EBPO(**kw)


def test_zero_frac_is_reported_per_cluster():
    _, m = get_advantage("grpo")(torch.tensor([1.0, 0, 1, 1]), torch.tensor([0, 0, 1, 1]),
                                 clusters=["t1", "t1", "t2", "t2"])
    assert m["adv/zero_frac/t1"] == 0.0 and m["adv/zero_frac/t2"] == 1.0


@pytest.mark.parametrize("group_size", [2, 4, 8])
def test_monte_carlo_mse_and_mean_shrinkage_against_the_oracle(group_size):
    """theta_q ~ N(0.5, 0.2^2) clipped to [0, 1], Bernoulli rewards, 3000 prompts in
    batches of 16 (seed 0). Observed: mean S 0.763 / 0.545 / 0.402 against S* 0.729 /
    0.555 / 0.407 at G = 2 / 4 / 8; MSE(V_EB) 0.0295 / 0.0234 / 0.0157 against the group
    mean's 0.1074 / 0.0528 / 0.0264. The MSE of V_EB must beat the group mean's, and the
    mean S must be within 0.1 of S* = (sigma_w^2/G) / (sigma_w^2/G + tau^2); the turn-1
    estimator (total variance for sigma2, raw variance of group means for tau2) gave
    S = 0.46 against S* = 0.72 at G = 2."""
    r = shrinkage_monte_carlo(group_size, prompts=3000, seed=0)
    assert r["mse_eb"] < r["mse_group_mean"]
    assert abs(r["mean_shrinkage"] - r["oracle_shrinkage"]) < 0.1, r
