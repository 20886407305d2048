"""GAE against a straightforward per-sequence backward loop."""

from __future__ import annotations

import pytest
import torch

from lmpo.advantages import gae

# the float64 references of these estimators live here (tests/test_advantage_references.py
# reads this line): a critic's values, not one score per sample
ESTIMATOR_REFERENCES = ("gae",)

D = torch.float64


def loop_gae(rewards, values, length, gamma, lam, v_end=0.0):
    """Per-sequence GAE; `v_end` is V after the last token (0: terminal; a bootstrap)."""
    adv = [0.0] * length
    last = 0.0
    for t in reversed(range(length)):
        v_next = values[t + 1] if t + 1 < length else v_end
        delta = rewards[t] + gamma * v_next - values[t]
        last = delta + gamma * lam * last
        adv[t] = last
    return adv


@pytest.mark.parametrize("seed", range(5))
def test_matches_per_sequence_loop_with_right_padding(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 7, 12
    gamma = float(torch.rand(1, generator=g)) * 0.5 + 0.5
    lam = float(torch.rand(1, generator=g))
    lengths = torch.randint(0, t + 1, (b,), generator=g).tolist()
    mask = torch.zeros(b, t, dtype=D)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    rewards = torch.randn(b, t, generator=g, dtype=D)
    values = torch.randn(b, t, generator=g, dtype=D)
    rewards_padded = torch.where(mask.bool(), rewards, torch.full_like(rewards, 1e6))
    values_padded = torch.where(mask.bool(), values, torch.full_like(values, -1e6))
    adv, ret = gae(rewards_padded, values_padded, mask, gamma=gamma, lam=lam)
    for i, n in enumerate(lengths):
        want = loop_gae(rewards[i].tolist(), values[i].tolist(), n, gamma, lam)
        torch.testing.assert_close(adv[i, :n], torch.tensor(want, dtype=D), rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(ret[i, :n], adv[i, :n] + values[i, :n], rtol=1e-12, atol=0)
        assert (adv[i, n:] == 0).all() and (ret[i, n:] == 0).all()


def test_terminal_reward_only_hand_computed():
    # one reward 1 at the last token, V = 0.5 everywhere, gamma = 1, lam = 0.5
    rewards = torch.tensor([[0.0, 0.0, 1.0, 9.0]], dtype=D)
    values = torch.tensor([[0.5, 0.5, 0.5, 9.0]], dtype=D)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]], dtype=D)
    adv, _ = gae(rewards, values, mask, gamma=1.0, lam=0.5)
    # deltas: 0, 0, 0.5 -> A2 = 0.5, A1 = 0.25, A0 = 0.125
    torch.testing.assert_close(adv, torch.tensor([[0.125, 0.25, 0.5, 0.0]], dtype=D))


def test_shape_error():
    with pytest.raises(ValueError, match=r"\(2, 3\), \(2, 4\)"):
        gae(torch.zeros(2, 3), torch.zeros(2, 4), torch.ones(2, 3))


def test_registered_gae_estimator_is_gae_then_whitening():
    from lmpo.advantages import advantage_meta, get_advantage
    from lmpo.masked import masked_whiten

    g = torch.Generator().manual_seed(3)
    rewards, values = torch.randn(4, 6, generator=g, dtype=D), torch.randn(4, 6, generator=g,
                                                                           dtype=D)
    mask = torch.ones(4, 6, dtype=D)
    mask[1, 3:] = 0
    assert advantage_meta("gae")["needs_critic"] and not advantage_meta("grpo")["needs_critic"]
    adv, ret, metrics = get_advantage("gae", gamma=0.9, lam=0.8)(rewards, values, mask)
    raw, want_ret = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, masked_whiten(raw, mask), rtol=1e-12, atol=0)
    torch.testing.assert_close(ret, want_ret, rtol=0, atol=0)
    adv, _, _ = get_advantage("gae", whiten=False)(rewards, values, mask)
    torch.testing.assert_close(adv, gae(rewards, values, mask)[0], rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"lam=1.5 is outside its domain \[0, 1\]"):
        get_advantage("gae", lam=1.5)
