"""Registry errors and the KL estimators."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.losses import default_aggregation, get_loss, kl_penalty, list_losses, loss_hparams

API_TABLE = {
    "ppo_clip": {"eps_low": 0.2, "eps_high": 0.2, "clip_ratio_c": None},
    "gspo": {"eps_low": 3e-4, "eps_high": 4e-4},
    "cispo": {"eps_low": 1.0, "eps_high": 5.0},
    "reinforce": {},
    "output_reset": {"alpha": 0.2, "weight": "sign"},
    "cegppo": {"eps_low": 0.2, "eps_high": 0.2, "beta1": 0.5, "beta2": 1.0, "clip_ratio_c": None},
    "dppo_tv": {"delta_low": 0.15, "delta_high": 0.15, "clip_ratio_c": 3.0},
    "dppo_kl": {"delta": 0.05, "clip_ratio_c": 3.0},
    "drpo": {"delta": 12.5},
}
METRIC_KEYS = {
    "ppo_clip": {"clipfrac", "clipfrac_low", "clipfrac_high"},
    "cegppo": {"clipfrac", "clipfrac_low", "clipfrac_high"},
    "output_reset": {"or/residual", "or/overshoot_frac"},
    "dppo_tv": {"dppo/masked_frac"},
    "dppo_kl": {"dppo/masked_frac"},
    "drpo": {"drpo/weight_min", "drpo/weight_max", "drpo/penalty_mean"},
}


def test_api_table_defaults():
    assert set(list_losses()) == set(API_TABLE)
    for name, hp in API_TABLE.items():
        assert loss_hparams(name) == hp, name


@pytest.mark.parametrize("name", sorted(API_TABLE))
def test_metric_keys(name):
    x = torch.zeros(2, 3)
    _, metrics = get_loss(name)(x - 1, x - 1.1, torch.ones(2), torch.ones(2, 3))
    assert {"displacement", "approx_kl"} | METRIC_KEYS.get(name, set()) <= set(metrics)


def test_default_aggregations():
    assert default_aggregation("gspo") == "seq-mean-token-mean"
    assert default_aggregation("drpo") == "seq-mean-token-sum-norm"
    assert default_aggregation("cegppo") == "token-mean"


def test_unknown_name_lists_valid_ones():
    with pytest.raises(KeyError, match="ppo_clp.*did you mean 'ppo_clip'.*cegppo, cispo"):
        get_loss("ppo_clp")


def test_unknown_hparam_names_valid_ones():
    with pytest.raises(TypeError, match=r"\['eps'\].*valid ones: eps_low, eps_high, clip_ratio_c"):
        get_loss("ppo_clip", eps=0.2)
    with pytest.raises(TypeError, match="valid ones: none"):
        get_loss("reinforce", alpha=1)


def test_bad_values_and_shapes():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"old_logp shape \(2, 4\).*logp shape \(2, 3\)"):
        get_loss("ppo_clip")(x, torch.zeros(2, 4), torch.ones(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"adv shape \(3,\)"):
        get_loss("drpo")(x, x, torch.ones(3), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"mask shape \(2,\)"):
        get_loss("cispo")(x, x, torch.ones(2), torch.ones(2))
    with pytest.raises(ValueError, match="weight"):
        get_loss("output_reset", weight="square")(x, x, torch.ones(2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="clip_ratio_c"):
        get_loss("ppo_clip", clip_ratio_c=0.5)(x, x, torch.ones(2), torch.ones(2, 3))


def test_kl_estimators_hand_values():
    logp = torch.tensor([[math.log(0.5), math.log(0.2)]], dtype=torch.float64)
    ref = torch.tensor([[math.log(0.25), math.log(0.4)]], dtype=torch.float64)
    d = [math.log(2), math.log(0.5)]
    torch.testing.assert_close(kl_penalty(logp, ref, "k1")[0], torch.tensor(d, dtype=torch.float64))
    torch.testing.assert_close(kl_penalty(logp, ref, "k2")[0],
                               torch.tensor([0.5 * x * x for x in d], dtype=torch.float64))
    k3 = [math.exp(-x) + x - 1 for x in d]
    want = torch.tensor(k3, dtype=torch.float64)
    torch.testing.assert_close(kl_penalty(logp, ref, "k3")[0], want)
    with pytest.raises(ValueError, match="valid kinds: k1, k2, k3"):
        kl_penalty(logp, ref, "k4")


def test_k3_is_clamped_and_gradient_is_closed_form():
    logp = torch.tensor([[-1.0, -60.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    k3 = kl_penalty(logp, ref, "k3")
    assert float(k3[0, 1].detach()) == 10.0
    (g,) = torch.autograd.grad(k3.sum(), logp)
    # d/dlogp [e^(ref-logp) - (ref-logp) - 1] = 1 - e^(ref-logp)
    assert float(g[0, 0]) == pytest.approx(1 - math.exp(-0.5), rel=1e-12)
    assert float(g[0, 1]) == 0.0
