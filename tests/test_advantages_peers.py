"""The engines' estimators against hand-computed values and loop references (verl's own
functions are compared in tests/test_verl_peers.py; SkyRL's maxrl has no installable
package here, so its formula is the reference)."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.advantages import get_advantage

# the float64 references of these estimators live here (tests/test_advantage_references.py
# reads this line): the engines' estimators, against hand-computed values and loops
ESTIMATOR_REFERENCES = ("reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo", "gpg",
                        "grpo_passk", "maxrl")

D = torch.float64
S = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0], dtype=D)
G = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
L = torch.tensor([3.0, 5.0, 2.0, 4.0, 6.0, 1.0, 2.0, 3.0], dtype=D)


def whiten_loop(x, n):
    """Token-level whitening written out token by token (the value x_i repeated n_i times)."""
    tokens = [v for v, k in zip(x, n, strict=True) for _ in range(int(k))]
    big_n = len(tokens)
    mu = sum(tokens) / (big_n + 1e-8)
    var = sum((v - mu) ** 2 for v in tokens) / (big_n + 1e-8) * big_n / (big_n - 1)
    return [(v - mu) / math.sqrt(var + 1e-8) for v in x]


def test_reinforce_plus_plus_whitens_scores_over_tokens():
    adv, _ = get_advantage("reinforce_plus_plus")(S, G, lengths=L)
    torch.testing.assert_close(adv, torch.tensor(whiten_loop(S.tolist(), L.tolist()), dtype=D),
                               rtol=1e-12, atol=1e-12)


def test_reinforce_plus_plus_baseline_centres_then_whitens():
    centred = [1 - 0.75, 0 - 0.75, 0.25, 0.25, -0.25, -0.25, 0.75, -0.25]
    adv, _ = get_advantage("reinforce_plus_plus_baseline")(S, G, lengths=L)
    torch.testing.assert_close(adv, torch.tensor(whiten_loop(centred, L.tolist()), dtype=D),
                               rtol=1e-12, atol=1e-12)


def test_opo_subtracts_the_length_weighted_group_mean():
    b0 = (3 * 1 + 5 * 0 + 2 * 1 + 4 * 1) / 14
    b1 = (6 * 0 + 1 * 0 + 2 * 1 + 3 * 0) / 12
    want = [1 - b0, -b0, 1 - b0, 1 - b0, -b1, -b1, 1 - b1, -b1]
    adv, _ = get_advantage("opo")(S, G, lengths=L)
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)


def test_gpg_rescales_by_the_share_of_nonzero_scores():
    alpha = 8 / 4  # four of the eight scores are non-zero
    want = [alpha * (s - m) / 2.0 for s, m in zip(S.tolist(), [0.75] * 4 + [0.25] * 4,
                                                   strict=True)]
    adv, _ = get_advantage("gpg", f_norm=2.0)(S, G)
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)


def test_passk_rewards_only_the_best_of_each_group():
    s = torch.tensor([0.2, 0.9, 0.5, 0.0, 0.3, 0.3], dtype=D)
    g = torch.tensor([0, 0, 0, 1, 1, 1])
    adv, _ = get_advantage("grpo_passk", norm_adv_by_std=False)(s, g)
    assert adv[1] == pytest.approx(0.4) and adv[0] == adv[2] == 0
    assert (adv[3:] == 0).all()  # a tie at the top: the best minus the second best is 0
    scaled, _ = get_advantage("grpo_passk")(s, g)
    assert scaled[1] == pytest.approx(0.4 / (torch.std(s[:3]).item() + 1e-6))


def test_maxrl_divides_the_centred_score_by_the_group_mean():
    adv, _ = get_advantage("maxrl")(S, G)
    p0, p1 = 0.75, 0.25
    want = [(1 - p0) / (p0 + 1e-6), -p0 / (p0 + 1e-6), (1 - p0) / (p0 + 1e-6),
            (1 - p0) / (p0 + 1e-6), -p1 / (p1 + 1e-6), -p1 / (p1 + 1e-6),
            (1 - p1) / (p1 + 1e-6), -p1 / (p1 + 1e-6)]
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)
    alone, _ = get_advantage("maxrl")(torch.tensor([0.7], dtype=D), torch.tensor([0]))
    assert float(alone) == pytest.approx(0.7)  # SkyRL: a group of one keeps its score


@pytest.mark.parametrize("name", ["reinforce_plus_plus", "reinforce_plus_plus_baseline", "opo"])
def test_a_length_estimator_without_lengths_says_so(name):
    with pytest.raises(ValueError, match="needs each response's length"):
        get_advantage(name)(S, G)
    with pytest.raises(ValueError, match="lengths shape"):
        get_advantage(name)(S, G, lengths=L[:3])
