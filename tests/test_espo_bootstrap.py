"""ESPO's no-r_fail ablation as a truncation: `stop_value: bootstrap` gives a stopped
response no terminal reward and GAE continues its return from the critic's V(s_t) at the
stop. GAE's bootstrap against a float64 loop, the controllers' option and its errors, and
a training run whose GAE inputs are checked row by row."""

from __future__ import annotations

import pytest
import torch

from lmpo.advantages import gae
from lmpo.config import ConfigError
from lmpo.rollout import ESPO, RandomStop, build_controller
from tests.test_gae import D, loop_gae
from tests.test_trainer import tiny_cfg


@pytest.mark.parametrize("seed", range(4))
def test_gae_bootstrap_matches_a_loop_that_continues_with_the_value(seed):
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 9
    gamma, lam = 0.5 + 0.5 * float(torch.rand(1, generator=g)), float(torch.rand(1, generator=g))
    lengths = torch.randint(1, t + 1, (b,), generator=g).tolist()
    mask = torch.zeros(b, t, dtype=D)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    rewards, values = torch.randn(b, t, generator=g, dtype=D), torch.randn(b, t, generator=g,
                                                                           dtype=D)
    boot = torch.randn(b, generator=g, dtype=D)
    boot[::2] = 0.0  # terminal rows
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam, bootstrap=boot)
    plain, _ = gae(rewards, values, mask, gamma=gamma, lam=lam)
    for i, n in enumerate(lengths):
        want = loop_gae(rewards[i].tolist(), values[i].tolist(), n, gamma, lam, float(boot[i]))
        torch.testing.assert_close(adv[i, :n], torch.tensor(want, dtype=D), rtol=1e-10,
                                   atol=1e-12)
        torch.testing.assert_close(ret[i, :n], adv[i, :n] + values[i, :n], rtol=1e-12, atol=0)
        assert (adv[i, n:] == 0).all()
        if boot[i] == 0:
            assert torch.equal(adv[i], plain[i])
    with pytest.raises(ValueError, match=r"bootstrap must be \[B\] = \(6,\), got \(5,\)"):
        gae(rewards, values, mask, bootstrap=torch.zeros(5, dtype=D))


def test_stop_value_is_a_controller_option_with_clear_errors():
    espo = ESPO(stop_value="bootstrap")
    assert espo.bootstraps and espo.stop_score == 0.0 and espo.notes == []
    assert not ESPO().bootstraps and ESPO().stop_score == 0.0  # absorbing: a failure's reward
    assert ESPO(r_fail=-1.0).stop_score == -1.0
    assert RandomStop(savings=0.2, stop_value="bootstrap").bootstraps
    with pytest.raises(ValueError, match="r_fail=-1.0 applies to stop_value absorbing"):
        ESPO(r_fail=-1.0, stop_value="bootstrap")
    with pytest.raises(ValueError, match="unknown stop_value 'zero'; valid: absorbing, bootstrap"):
        ESPO(stop_value="zero")
    with pytest.raises(ValueError, match=r"stop_value='zero' is outside its domain \{absorbing"):
        build_controller("espo", {"stop_value": "zero"})
    assert not build_controller("none", {}).bootstraps


def test_a_bootstrapped_stop_needs_a_critic(tiny_policy_dir):
    with pytest.raises(ConfigError, match="needs a critic to bootstrap a stop from"):
        tiny_cfg(tiny_policy_dir, "grpo", [
            "controller={name: random_stop, hparams: {savings: 0.3, stop_value: bootstrap}}"])


@pytest.mark.parametrize("stop_value", ["bootstrap", "absorbing"])
def test_a_run_bootstraps_exactly_its_stopped_rows(stop_value, tiny_policy_dir, tmp_path,
                                                   monkeypatch):
    """GAE's inputs in a real run (random stops, KL out of the reward so that a row's last
    reward is its score alone, a random critic head so that no value is 0): a stopped row
    gets no reward and V(s_t) at its last token as the bootstrap; every other row stays
    terminal. The absorbing run scores a stop as a failure (0 here), bootstraps nothing."""
    import importlib

    from lmpo.trainer.loop import train

    gae_mod = importlib.import_module("lmpo.advantages.gae")  # the package's `gae` is the function
    seen = []
    real = gae_mod.gae

    def spy(rewards, values, mask, **kw):
        seen.append((rewards.clone(), values.clone(), mask.clone(), kw.get("bootstrap")))
        return real(rewards, values, mask, **kw)

    monkeypatch.setattr(gae_mod, "gae", spy)
    cfg = tiny_cfg(tiny_policy_dir, "ppo_clip", [
        "steps=3", "kl.coef=0", "rollout.max_new_tokens=8", "critic.init=random",
        f"controller={{name: random_stop, hparams: {{savings: 0.4, hazard: 0.3, "
        f"stop_value: {stop_value}}}}}"])
    train(cfg, tmp_path / "run", progress=False)
    boots = [s for s in seen if s[3] is not None]
    if stop_value == "absorbing":
        assert not boots
        return
    assert boots, "no stop was bootstrapped in 3 steps"
    rows = 0
    for rewards, values, mask, boot in boots:
        last = mask.sum(-1).long() - 1
        idx = torch.arange(len(last))
        stopped = boot != 0
        assert stopped.any() and not stopped.all()
        torch.testing.assert_close(boot[stopped], values[idx, last][stopped], rtol=0, atol=0)
        assert (rewards[idx, last][stopped] == 0).all()
        rows += int(stopped.sum())
    assert rows >= 3
