"""lmpo inside SkyRL (skyrl-train 0.3.1, in its own environment: make test-skyrl): every lmpo
loss and estimator in SkyRL's registries, and for every loss SkyRL also ships, SkyRL's
function and lmpo's registered one on the same tensors under SkyRL's own default config
(its ppo_base_config.yaml), in each of its loss reductions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("skyrl_train", reason="skyrl-train not installed: run `make test-skyrl`")
import skyrl_train  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from skyrl_train.utils.ppo_utils import (  # noqa: E402
    AdvantageEstimatorRegistry,
    PolicyLossRegistry,
)

from lmpo.advantages import group_estimators  # noqa: E402
from lmpo.integrations.skyrl import register  # noqa: E402
from lmpo.losses import list_losses  # noqa: E402

REDUCTIONS = ["token_mean", "sequence_mean", "seq_mean_token_sum_norm"]
# SkyRL exponentiates its log-ratios in float32 (_safe_exp_delta): the comparison is in
# float32, to float32 rounding
RTOL, ATOL = 2e-6, 1e-7


def default_algorithm(**overrides):
    """SkyRL's own trainer.algorithm defaults, with max_seq_len (set by its trainer)."""
    path = Path(skyrl_train.__file__).parent / "config" / "ppo_base_config.yaml"
    algo = OmegaConf.load(path).trainer.algorithm
    algo.max_seq_len = 12
    OmegaConf.set_struct(algo, False)
    return OmegaConf.merge(algo, OmegaConf.create(overrides))


def batch(seed, b=8, t=12):
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(b, t, generator=g) * 0.9 + 0.05)
    logp = (old + torch.randn(b, t, generator=g)).clamp(max=-1e-4)
    adv = torch.randn(b, 1, generator=g).expand(b, t).clone()
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).float()
    rollout = old + 0.3 * torch.randn(b, t, generator=g)
    return logp, old, adv, mask, rollout


# SkyRL loss, lmpo loss, config overrides (the second set makes each mechanism act)
PAIRS = [("regular", "ppo_clip", {}), ("regular", "ppo_clip", {"eps_clip_high": 0.28}),
         ("dual_clip", "ppo_clip", {"policy_loss_type": "dual_clip",
                                    "lmpo_hparams": {"clip_ratio_c": 3.0}}),
         ("regular", "ppo_clip", {"use_tis": True, "tis_imp_ratio_cap": 2.0}),
         ("gspo", "gspo", {"eps_clip_low": 3e-4, "eps_clip_high": 4e-4}),
         ("cispo", "cispo", {}), ("cispo", "cispo", {"cispo": {"cispo_eps_clip_low": 0.5,
                                                              "cispo_eps_clip_high": 0.5}}),
         ("sapo", "sapo", {}), ("sapo", "sapo", {"sapo": {"tau_pos": 2.0, "tau_neg": 3.0}}),
         ("clip_cov", "clip_cov", {}),
         ("clip_cov", "clip_cov", {"clip_cov": {"clip_ratio": 0.2, "clip_cov_lb": -1.0,
                                                "clip_cov_ub": 1.0}}),
         ("kl_cov", "kl_cov", {})]


@pytest.fixture(scope="module", autouse=True)
def registered():
    """SkyRL's registries refilled, then docs/skyrl.md's registration block run as written."""
    from pathlib import Path

    from tests.doc_blocks import fenced_blocks

    PolicyLossRegistry.repopulate_registry()
    AdvantageEstimatorRegistry.repopulate_registry()
    page = Path(__file__).resolve().parents[1] / "docs" / "skyrl.md"
    code = next(c for lang, _, c in fenced_blocks(page) if lang == "python")
    exec(compile(code, str(page), "exec"), {})
    register()  # idempotent: the page's call registered everything already


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0]}-{len(p[2])}")
def test_skyrls_losses_equal_lmpos_registered_ones(pair, reduction):
    theirs_name, ours_name, overrides = pair
    cfg = default_algorithm(loss_reduction=reduction, **overrides)
    logp, old, adv, mask, rollout = batch(0)
    out = []
    for name in (theirs_name, f"lmpo_{ours_name}"):
        lp = logp.clone().requires_grad_(True)
        torch.manual_seed(0)  # Clip-Cov's random selection: the same draw
        loss, _ = PolicyLossRegistry.get(name)(lp, old, adv, cfg, loss_mask=mask,
                                               rollout_logprobs=rollout)
        out.append((loss, torch.autograd.grad(loss, lp)[0]))
    (theirs, gt), (ours, go) = out
    torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(go, gt, rtol=RTOL, atol=ATOL)


def test_every_lmpo_loss_runs_through_skyrls_registry():
    cfg = default_algorithm()
    logp, old, adv, mask, rollout = batch(1)
    for name in list_losses():
        loss, clip = PolicyLossRegistry.get(f"lmpo_{name}")(logp.clone().requires_grad_(True),
                                                            old, adv, cfg, loss_mask=mask,
                                                            rollout_logprobs=rollout)
        assert loss.dim() == 0 and torch.isfinite(loss) and isinstance(clip, float), name


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_through_skyrls_registry_equals_skyrls(norm):
    """SkyRL's grpo (grpo_norm_by_std true / false) against lmpo_grpo / lmpo_dr_grpo from
    SkyRL's registry, groups of four (SkyRL gives a group of one its raw score, lmpo 0)."""
    g = torch.Generator().manual_seed(3)
    scores = (torch.rand(12, generator=g) < 0.5).float()
    rewards = torch.zeros(12, 5)
    rewards[:, -1] = scores
    mask = torch.ones(12, 5)
    index = np.array([f"p{i // 4}" for i in range(12)], dtype=object)
    theirs, _ = AdvantageEstimatorRegistry.get("grpo")(
        token_level_rewards=rewards.clone(), response_mask=mask, index=index,
        grpo_norm_by_std=norm)
    ours, _ = AdvantageEstimatorRegistry.get("lmpo_grpo" if norm else "lmpo_dr_grpo")(
        token_level_rewards=rewards.clone(), response_mask=mask, index=index,
        grpo_norm_by_std=norm)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    assert (theirs != 0).any()
    assert {f"lmpo_{n}" for n in group_estimators()} <= \
        set(AdvantageEstimatorRegistry.list_available())
