"""lmpo against verl on random inputs (runs in the verl environment, verl 0.9.1: make
test-verl; and at the supported range's other end, verl 0.9.0: make test-verl-range)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl", reason="verl not installed: run `make test-verl`")
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config.actor import ActorConfig  # noqa: E402

from lmpo.advantages import get_advantage, group_estimators  # noqa: E402
from lmpo.integrations import verl as lmpo_verl  # noqa: E402
from lmpo.losses import AGG_MODES, aggregate, get_loss, list_losses, loss_meta  # noqa: E402

VERL_MODES = list(AGG_MODES)
VERL_VERSION = tuple(int(x) for x in verl.__version__.split(".")[:3])


def verl_mode(verl_name: str, mode: str) -> str:
    """The aggregation verl's own `verl_name` applies when asked for `mode`: verl 0.9.0's
    GSPO aggregates seq-mean-token-mean whatever loss_agg_mode says (0.9.1 honours the
    mode, as lmpo's gspo does: docs/engines.md)."""
    return "seq-mean-token-mean" if verl_name == "gspo" and VERL_VERSION < (0, 9, 1) else mode


def rtol_for(mode: str) -> float:
    """Rounding level, except the one documented deviation: verl divides each row of
    seq-mean-token-mean by (tokens + 1e-8), lmpo by its token count, a relative
    difference of at most 1e-8 (docs/decisions.md)."""
    return 2e-8 if mode == "seq-mean-token-mean" else 1e-12


def batch(seed, b=6, t=9, dtype=torch.float64):
    """float64, so that the comparisons below are at rounding level (rtol 1e-12)."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(b, t, generator=g, dtype=dtype) * 0.9 + 0.05)
    logp = (old + 0.4 * torch.randn(b, t, generator=g, dtype=dtype)).clamp(max=-1e-4)
    adv = torch.randn(b, t, generator=g, dtype=dtype)
    mask = (torch.rand(b, t, generator=g) < 0.8).to(dtype)
    mask[0] = 0
    return logp, old, adv, mask


def actor_config(**kw):
    return ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, **kw)


def verl_loss(name, logp, old, adv, mask, mode, **cfg_kw):
    fn = core_algos.get_policy_loss_fn(name)
    return fn(old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask,
              loss_agg_mode=mode, config=actor_config(**cfg_kw))[0]


CASES = [
    # lmpo name, lmpo hparams, verl name, verl config
    ("ppo_clip", {"eps_low": 0.2, "eps_high": 0.2, "clip_ratio_c": 3.0}, "vanilla",
     {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0}),
    ("ppo_clip", {"eps_low": 0.1, "eps_high": 0.28, "clip_ratio_c": 1.5}, "vanilla",
     {"clip_ratio_low": 0.1, "clip_ratio_high": 0.28, "clip_ratio_c": 1.5}),
    ("ppo_clip", {"eps_low": 0.2, "eps_high": 0.28}, "vanilla",  # dual clip off = c -> inf
     {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 1e30}),
    ("cispo", {"eps_low": 1.0, "eps_high": 0.28}, "cispo",
     {"clip_ratio_low": 1.0, "clip_ratio_high": 0.28}),
    ("gspo", {"eps_low": 0.05, "eps_high": 0.1}, "gspo",
     {"clip_ratio_low": 0.05, "clip_ratio_high": 0.1}),
    ("dppo_tv", {"delta_low": 0.1, "delta_high": 0.05, "clip_ratio_c": 3.0}, "dppo_tv",
     {"clip_ratio_low": 0.1, "clip_ratio_high": 0.05, "clip_ratio_c": 3.0}),
    ("dppo_kl", {"delta": 0.02, "clip_ratio_c": 3.0}, "dppo_kl",
     {"clip_ratio_low": 0.02, "clip_ratio_high": 0.02, "clip_ratio_c": 3.0}),
]


@pytest.mark.parametrize("mode", VERL_MODES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[2]}")
@pytest.mark.parametrize("seed", [0, 1])
def test_losses_equal_verl(case, mode, seed):
    name, hp, verl_name, cfg_kw = case
    logp, old, adv, mask = batch(seed)
    logp_a = logp.clone().requires_grad_(True)
    loss_tok, _ = get_loss(name, **hp)(logp_a, old, adv, mask)
    applied = verl_mode(verl_name, mode)
    ours = aggregate(loss_tok, mask, applied)
    logp_b = logp.clone().requires_grad_(True)
    theirs = verl_loss(verl_name, logp_b, old, adv, mask, mode, **cfg_kw)
    torch.testing.assert_close(ours, theirs, rtol=rtol_for(applied), atol=1e-14)
    (ga,) = torch.autograd.grad(ours, logp_a)
    (gb,) = torch.autograd.grad(theirs, logp_b)
    torch.testing.assert_close(ga, gb, rtol=rtol_for(applied), atol=1e-14)


@pytest.mark.parametrize("mode", VERL_MODES)
def test_aggregate_equals_agg_loss_with_global_counts(mode):
    logp, _, _, mask = batch(3)
    for kw_ours, kw_verl in [({}, {}), ({"num_tokens": 40, "num_seqs": 9, "horizon": 12},
                                        {"batch_num_tokens": 40, "global_batch_size": 9,
                                         "loss_scale_factor": 12})]:
        ours = aggregate(logp, mask, mode, **kw_ours)
        theirs = core_algos.agg_loss(logp, mask, mode, **kw_verl)
        torch.testing.assert_close(ours, theirs, rtol=rtol_for(mode), atol=1e-14)


def test_every_lmpo_loss_is_in_verls_registry_and_returns_what_lmpo_returns():
    import verl  # noqa: F401  (the entry point registers on import)

    for name in list_losses():
        fn = core_algos.get_policy_loss_fn(f"lmpo_{name}")
        logp, old, adv, mask = batch(5)
        cfg = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2)
        for mode in VERL_MODES:
            torch.manual_seed(0)  # the same draw for a loss that selects tokens at random
            loss, metrics = fn(old_log_prob=old, log_prob=logp, advantages=adv,
                               response_mask=mask, loss_agg_mode=mode, config=cfg)
            hp = lmpo_verl.resolve_hparams(name, cfg)
            torch.manual_seed(0)
            tok = get_loss(name, **hp)(logp, old, adv, mask)[0]
            fixed = loss_meta(name)["peer_agg"].get("verl")  # where verl fixes it (sapo, ...)
            want = lmpo_verl.row_mean(tok, mask) if fixed == "row-mean" else \
                core_algos.agg_loss(tok, mask, fixed or mode)  # else verl's agg_loss, as asked
            torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-14)
            assert "actor/pg_clipfrac" in metrics and "actor/ppo_kl" in metrics


def test_rollout_is_weights_and_explicit_hparams():
    logp, old, adv, mask = batch(6)
    w = torch.rand_like(logp)
    policy_loss = lmpo_verl.LmpoPolicyLossConfig(loss_mode="lmpo_cegppo",
                                                 hparams={"beta1": 0.0, "beta2": 0.0})
    cfg = actor_config(clip_ratio_low=0.2, clip_ratio_high=0.2, policy_loss=policy_loss)
    fn = core_algos.get_policy_loss_fn("lmpo_cegppo")
    loss, _ = fn(old, logp, adv, mask, "token-mean", cfg, rollout_is_weights=w)
    tok, _ = get_loss("cegppo", beta1=0.0, beta2=0.0)(logp, old, adv, mask)
    torch.testing.assert_close(loss, aggregate(tok * w, mask, "token-mean"), rtol=1e-12, atol=1e-14)


def test_lmpo_ebpo_through_verls_registry_equals_lmpo():
    lmpo_verl._ESTIMATORS.clear()
    fn = core_algos.get_adv_estimator_fn("lmpo_ebpo")
    ours = get_advantage("ebpo")
    rng = np.random.default_rng(0)
    for _ in range(3):
        scores = torch.tensor((rng.random(12) < 0.5).astype(np.float64))
        mask = torch.ones(12, 5, dtype=torch.float64)
        rewards = torch.zeros(12, 5, dtype=torch.float64)
        rewards[:, -1] = scores
        index = np.array([f"uid{i // 4}" for i in range(12)], dtype=object)
        adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=index, epsilon=1e-6,
                      config=None)
        want, _ = ours(scores, torch.arange(12) // 4)
        torch.testing.assert_close(adv, want[:, None].expand(12, 5), rtol=1e-12, atol=1e-14)
    assert set(lmpo_verl.estimator_state()) == {"ebpo"}
    assert {f"lmpo_{n}" for n in group_estimators()} <= set(core_algos.ADV_ESTIMATOR_REGISTRY)


def test_entry_point_registers_on_plain_import_verl():
    """A fresh interpreter that only imports verl finds every lmpo name (verl.plugins)."""
    import subprocess
    import sys

    code = ("import verl\n"
            "from verl.trainer.ppo.core_algos import get_policy_loss_fn, get_adv_estimator_fn\n"
            "from lmpo.losses import list_losses\n"
            "from lmpo.advantages import group_estimators\n"
            "[get_policy_loss_fn('lmpo_' + n) for n in list_losses()]\n"
            "[get_adv_estimator_fn('lmpo_' + n) for n in group_estimators()]\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


DOC_OVERRIDES = {  # the overrides docs/verl.md gives, per method
    "cegppo": ["actor_rollout_ref.actor.policy_loss.loss_mode=lmpo_cegppo",
               "+actor_rollout_ref.actor.policy_loss.hparams.beta1=0.5",
               "+actor_rollout_ref.actor.policy_loss.hparams.beta2=1.0",
               "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "output_reset": ["actor_rollout_ref.actor.policy_loss.loss_mode=lmpo_output_reset",
                     "+actor_rollout_ref.actor.policy_loss.hparams.alpha=0.2",
                     "actor_rollout_ref.rollout.n=2",
                     "actor_rollout_ref.actor.loss_agg_mode=token-mean"],
    "drpo": ["actor_rollout_ref.actor.policy_loss.loss_mode=lmpo_drpo",
             "+actor_rollout_ref.actor.policy_loss.hparams.delta=12.5",
             "algorithm.norm_adv_by_std_in_grpo=false",
             "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm"],
}


@pytest.mark.parametrize("method", sorted(DOC_OVERRIDES))
def test_documented_overrides_build_verls_configs(method):
    """docs/verl.md's command-line overrides go through verl's own Hydra config and
    dataclass conversion, and resolve to the lmpo loss with the given hyper-parameters."""
    import os

    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    overrides = ["algorithm.adv_estimator=lmpo_ebpo",
                 "actor_rollout_ref.actor.policy_loss._target_="
                 "lmpo.integrations.verl.LmpoPolicyLossConfig",
                 "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                 *DOC_OVERRIDES[method]]
    if not any(o.startswith("actor_rollout_ref.rollout.n=") for o in overrides):
        overrides.append("actor_rollout_ref.rollout.n=4")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert type(actor.policy_loss).__name__ == "LmpoPolicyLossConfig"
    fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    logp, old, adv, mask = batch(7)
    loss, _ = fn(old, logp, adv, mask, actor.loss_agg_mode, actor)
    hp = lmpo_verl.resolve_hparams(method, actor)
    assert all(hp[k] == v for k, v in actor.policy_loss.hparams.items())
    want = core_algos.agg_loss(get_loss(method, **hp)(logp, old, adv, mask)[0], mask,
                               actor.loss_agg_mode)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-14)


def test_verls_own_settings_reach_a_loss_that_declares_them(monkeypatch):
    """A loss that declares verl's SAPO knobs (`peer_keys`) gets the actor's tau_pos /
    tau_neg through the adapter, `policy_loss.hparams` winning; the adapter names no
    loss, so this holds for any loss registered later."""
    from lmpo.losses.registry import LOSSES

    def tau_loss(logp, old_logp, adv, mask, *, tau_pos=1.0, tau_neg=1.05):
        loss_tok, metrics = get_loss("reinforce")(logp, old_logp, adv, mask)
        return loss_tok * tau_pos / tau_neg, metrics

    monkeypatch.setitem(LOSSES._entries, "tau_test", tau_loss)
    monkeypatch.setitem(LOSSES._meta, "tau_test", {"peer_keys": {
        "verl": {"tau_pos": ("tau_pos",), "tau_neg": ("tau_neg",)}}})
    cfg = actor_config(tau_pos=2.0, tau_neg=3.0)
    assert lmpo_verl.resolve_hparams("tau_test", cfg) == {"tau_pos": 2.0, "tau_neg": 3.0}
    logp, old, adv, mask = batch(8)
    loss, _ = lmpo_verl.make_policy_loss("tau_test")(old, logp, adv, mask, "token-mean", cfg)
    tok, _ = tau_loss(logp, old, adv, mask, tau_pos=2.0, tau_neg=3.0)
    torch.testing.assert_close(loss, aggregate(tok, mask, "token-mean"), rtol=1e-12, atol=1e-14)


def readme_verl_command() -> list[str]:
    """The overrides of the README's `python -m verl.trainer.main_ppo` block, as a shell
    would pass them (continuations joined, comments dropped)."""
    import shlex
    from pathlib import Path

    from tests.doc_blocks import fenced_blocks

    readme = Path(__file__).resolve().parents[1] / "README.md"
    code = next(c for lang, _, c in fenced_blocks(readme)
                if lang == "bash" and "verl.trainer.main_ppo" in c)
    words = shlex.split(code.replace("\\\n", " "), comments=True)
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    return words[3:]


def test_the_readmes_verl_command_is_the_documented_one_and_composes():
    """README's verl quick start: the CE-GPPO row of docs/verl.md's table (plus the loss
    config's target), composed by verl's own Hydra config into the lmpo loss."""
    import os
    import re
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from verl.utils.config import omega_conf_to_dataclass

    page = (Path(__file__).resolve().parents[1] / "docs" / "verl.md").read_text()
    row = re.search(r"^\| CE-GPPO \| `([^`]*)` \|", page, re.M).group(1).split()
    readme = readme_verl_command()
    target = "actor_rollout_ref.actor.policy_loss._target_=" \
             "lmpo.integrations.verl.LmpoPolicyLossConfig"
    assert target in readme and sorted(set(readme) - {target}) == sorted(row)
    assert set(DOC_OVERRIDES["cegppo"]) <= set(row)
    cfg_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfg_dir, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=[
            *readme, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
            "actor_rollout_ref.rollout.n=4"])
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor.policy_loss.loss_mode == "lmpo_cegppo"
    assert lmpo_verl.resolve_hparams("cegppo", actor) | {"beta1": 0.5, "beta2": 1.0} == \
        lmpo_verl.resolve_hparams("cegppo", actor)
    core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
