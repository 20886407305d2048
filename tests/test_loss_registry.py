"""Registry metadata and errors, and the KL estimators."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.losses import (
    AGG_MODES,
    default_aggregation,
    get_loss,
    kl_penalty,
    list_losses,
    loss_hparams,
    loss_meta,
    peer_hparams,
)


def metric_names(declared) -> set[str]:
    """The loss-level metric keys (without `loss/`) among declared metric names."""
    return {k.removeprefix("loss/") for k in declared if k.startswith("loss/")}


@pytest.mark.parametrize("name", list_losses())
def test_a_loss_reports_what_its_metadata_declares(name):
    """Every loss reports displacement and approx_kl (comparable across losses) and every
    loss-level metric it declares (`diagnostics`, `acts`, `engagement`, `clipfrac`); its
    post-update diagnostics exist and report `diag/` keys it declares."""
    from lmpo.losses.diagnostics import bind_post_update

    meta = loss_meta(name)
    x = torch.zeros(2, 3)
    _, metrics = get_loss(name)(x - 1, x - 1.1, torch.ones(2), torch.ones(2, 3))
    declared = set(meta["diagnostics"]) | {meta["engagement"] or ""}
    declared |= {(meta["acts"] or {}).get("metric", "")}
    want = {"displacement", "approx_kl"} | metric_names(declared)
    if meta["peer_keys"].get("verl") or meta["clipfrac"] != "clipfrac":
        want.add(meta["clipfrac"])
    assert want <= set(metrics), want - set(metrics)
    diag = {}
    for fn in bind_post_update(name, {}):
        diag |= fn(x - 1, x - 1.1, torch.ones(2), torch.ones(2, 3))
    assert {k for k in declared if k.startswith("diag/")} <= set(diag)
    assert all(k.startswith("diag/") for k in diag)


@pytest.mark.parametrize("name", list_losses())
def test_a_loss_has_what_the_readme_and_the_adapters_read(name):
    meta = loss_meta(name)
    assert meta["title"] and meta["source"] and meta["summary"], name
    assert meta["default_agg"] in AGG_MODES
    hparams = loss_hparams(name)
    for peer, keys in meta["peer_keys"].items():
        assert peer in ("verl", "trl", "skyrl") and set(keys) <= set(hparams), (peer, keys)


def test_peer_settings_reach_a_loss_that_declares_them(monkeypatch):
    """A loss that declares verl's `tau_pos` gets it from a verl actor config, the
    explicit `policy_loss.hparams` winning; a TRL GRPOConfig's epsilon_high reaches
    ppo_clip's eps_high (None falls back to epsilon)."""
    from types import SimpleNamespace

    from lmpo.integrations.verl import resolve_hparams
    from lmpo.losses.registry import LOSSES

    def tau_loss(logp, old_logp, adv, mask, *, tau_pos=1.0, tau_neg=1.05):
        return get_loss("reinforce")(logp, old_logp, adv, mask)

    monkeypatch.setitem(LOSSES._entries, "tau_test", tau_loss)
    monkeypatch.setitem(LOSSES._meta, "tau_test", {"peer_keys": {
        "verl": {"tau_pos": ("tau_pos",), "tau_neg": ("tau_neg",)}}})
    actor = {"tau_pos": 2.0, "tau_neg": 3.0, "clip_ratio": 0.2,
             "policy_loss": {"hparams": {"tau_neg": 4.0}}}
    assert resolve_hparams("tau_test", actor) == {"tau_pos": 2.0, "tau_neg": 4.0}
    assert resolve_hparams("ppo_clip", {"clip_ratio_low": 0.1, "clip_ratio": 0.3}) == \
        {"eps_low": 0.1, "eps_high": 0.3}
    args = SimpleNamespace(epsilon=0.2, epsilon_high=0.28)
    assert peer_hparams("ppo_clip", "trl", lambda k: getattr(args, k, None)) == \
        {"eps_low": 0.2, "eps_high": 0.28}
    args.epsilon_high = None
    assert peer_hparams("cegppo", "trl", lambda k: getattr(args, k, None))["eps_high"] == 0.2
    assert peer_hparams("gspo", "trl", lambda k: getattr(args, k, None)) == {}


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
    torch.testing.assert_close(kl_penalty(logp, ref, "abs")[0],
                               torch.tensor([abs(x) for x in d], dtype=torch.float64))
    with pytest.raises(ValueError, match="valid kinds: k1, k2, k3, abs, k1\\+, k3\\+, abs\\+"):
        kl_penalty(logp, ref, "k4")


@pytest.mark.parametrize("kind", ["k1+", "k3+", "abs+"])
def test_a_straight_through_kl_has_its_estimators_value_and_k2s_gradient(kind):
    """verl's `k1+`, `low_var_kl+`, `abs+`: forward the base estimator, backward k2's
    d/dlogp (logp - ref)^2 / 2 = logp - ref."""
    logp = torch.tensor([[-1.0, -2.5, -0.2]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -0.2]], dtype=torch.float64)
    got = kl_penalty(logp, ref, kind)
    torch.testing.assert_close(got.detach(), kl_penalty(logp.detach(), ref, kind[:-1]),
                               rtol=0, atol=0)
    (g,) = torch.autograd.grad(got.sum(), logp)
    torch.testing.assert_close(g, (logp - ref).detach(), rtol=0, atol=1e-15)


def test_k3_is_clamped_and_gradient_is_closed_form():
    logp = torch.tensor([[-1.0, -60.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0]], dtype=torch.float64)
    k3 = kl_penalty(logp, ref, "k3")
    assert float(k3[0, 1].detach()) == 10.0
    (g,) = torch.autograd.grad(k3.sum(), logp)
    # d/dlogp [e^(ref-logp) - (ref-logp) - 1] = 1 - e^(ref-logp)
    assert float(g[0, 0]) == pytest.approx(1 - math.exp(-0.5), rel=1e-12)
    assert float(g[0, 1]) == 0.0


def test_an_unknown_name_lists_the_valid_ones_under_a_true_plural():
    from lmpo.registry import plural

    with pytest.raises(KeyError, match="unknown loss 'nope'; valid losses: bnpo, "):
        get_loss("nope")
    assert [plural(n) for n in ("loss", "rollout correction", "coefficient schedule")] == [
        "losses", "rollout corrections", "coefficient schedules"]
