"""The engines' losses lmpo ships (SAPO, GPG, DRO, GMPO, Clip-Cov, KL-Cov) against verl
0.9.1's own functions on random float64 inputs: values and gradients, in every aggregation
mode verl accepts for each (verl's sapo and geo_mean ignore loss_agg_mode: their hard-coded
aggregation is compared), rtol 1e-10 (runs in the verl environment: make test-verl)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

verl = pytest.importorskip("verl", reason="verl not installed: run `make test-verl`")
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config.actor import PolicyLossConfig  # noqa: E402

from lmpo.integrations import verl as lmpo_verl  # noqa: E402
from lmpo.losses import AGG_MODES, aggregate, default_aggregation, get_loss  # noqa: E402
from tests.test_verl import actor_config, batch, verl_mode  # noqa: E402

RTOL = 1e-10


def full_batch(seed):
    """`batch` without its empty row (geo_mean's hard-coded mean counts empty rows)."""
    logp, old, adv, mask = batch(seed)
    mask[0, :4] = 1.0
    return logp, old, adv, mask


# lmpo name, lmpo hparams, verl config keywords, whether verl honours loss_agg_mode
CASES = [
    ("sapo", {}, {}, False),
    ("sapo", {"tau_pos": 2.0, "tau_neg": 3.5}, {"tau_pos": 2.0, "tau_neg": 3.5}, False),
    ("gpg", {}, {}, True),
    ("dro", {"beta": 0.3}, {"policy_loss": PolicyLossConfig(dro_beta=0.3)}, True),
    ("geo_mean", {}, {"clip_ratio": 0.2}, False),
    ("geo_mean", {"eps_low": 0.05, "eps_high": 0.3},
     {"clip_ratio_low": 0.05, "clip_ratio_high": 0.3}, False),
    ("clip_cov", {}, {"clip_ratio": 0.2, "policy_loss": PolicyLossConfig()}, True),
    ("clip_cov", {"clip_cov_ratio": 0.3, "clip_cov_lb": 0.05, "clip_cov_ub": 2.0,
                  "eps_low": 0.1, "eps_high": 0.28},
     {"clip_ratio_low": 0.1, "clip_ratio_high": 0.28,
      "policy_loss": PolicyLossConfig(clip_cov_ratio=0.3, clip_cov_lb=0.05, clip_cov_ub=2.0)},
     True),
    ("kl_cov", {}, {"policy_loss": PolicyLossConfig()}, True),
    ("kl_cov", {"kl_cov_ratio": 0.2, "ppo_kl_coef": 0.5},
     {"policy_loss": PolicyLossConfig(kl_cov_ratio=0.2, ppo_kl_coef=0.5)}, True),
]


def both(name, hp, cfg_kw, mode, honours, seed):
    """(lmpo's loss, lmpo's grad, verl's loss, verl's grad); both draw from torch's global
    generator from the same state (Clip-Cov's random selection)."""
    logp, old, adv, mask = full_batch(seed)
    lp_a = logp.clone().requires_grad_(True)
    torch.manual_seed(seed)
    tok, _ = get_loss(name, **hp)(lp_a, old, adv, mask)
    ours = aggregate(tok, mask, mode if honours else default_aggregation(name))
    lp_b = logp.clone().requires_grad_(True)
    torch.manual_seed(seed)
    fn = core_algos.get_policy_loss_fn(name)
    theirs = fn(old_log_prob=old, log_prob=lp_b, advantages=adv, response_mask=mask,
                loss_agg_mode=mode, config=actor_config(**cfg_kw))[0]
    (ga,) = torch.autograd.grad(ours, lp_a)
    (gb,) = torch.autograd.grad(theirs, lp_b)
    return ours, ga, theirs, gb


@pytest.mark.parametrize("mode", list(AGG_MODES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{len(c[1])}")
@pytest.mark.parametrize("seed", [0, 1])
def test_peer_losses_equal_verl(case, mode, seed):
    name, hp, cfg_kw, honours = case
    ours, ga, theirs, gb = both(name, hp, cfg_kw, mode, honours, seed)
    used = mode if honours else default_aggregation(name)
    rtol = 2e-8 if used == "seq-mean-token-mean" else RTOL  # verl's + 1e-8 (docs/decisions.md)
    torch.testing.assert_close(ours, theirs, rtol=rtol, atol=1e-14)
    torch.testing.assert_close(ga, gb, rtol=rtol, atol=1e-14)


def test_clip_cov_selects_tokens_at_random_like_verl():
    """Under the defaults most candidates go unselected, so the draw decides the loss: equal
    from the same generator state, different from another."""
    hp = {"clip_cov_ratio": 0.05, "clip_cov_lb": -1.0, "clip_cov_ub": 1.0}
    cfg = {"clip_ratio": 0.2, "policy_loss": PolicyLossConfig(
        clip_cov_ratio=0.05, clip_cov_lb=-1.0, clip_cov_ub=1.0)}
    values = set()
    for seed in range(6):
        ours, _, theirs, _ = both("clip_cov", hp, cfg, "token-sum", True, 0)
        torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=1e-14)
        logp, old, adv, mask = full_batch(0)
        torch.manual_seed(seed)
        values.add(round(float(aggregate(get_loss("clip_cov", **hp)(logp, old, adv, mask)[0],
                                         mask, "token-sum")), 12))
    assert len(values) > 1


def test_geo_mean_with_an_empty_row_differs_by_the_documented_factor():
    logp, old, adv, mask = batch(4)  # row 0 empty
    tok, _ = get_loss("geo_mean")(logp, old, adv, mask)
    ours = aggregate(tok, mask, "seq-mean-token-sum")
    theirs = core_algos.get_policy_loss_fn("geo_mean")(
        old, logp, adv, mask, "token-mean", actor_config(clip_ratio=0.2))[0]
    rows = mask.shape[0]
    nonempty = int((mask.sum(-1) > 0).sum())
    torch.testing.assert_close(ours * nonempty / rows, theirs, rtol=RTOL, atol=1e-14)


def test_the_plugin_reads_each_losss_verl_settings():
    cfg = actor_config(tau_pos=2.0, tau_neg=3.0, clip_ratio=0.2, policy_loss=PolicyLossConfig(
        dro_beta=0.4, clip_cov_ratio=0.01, clip_cov_lb=0.5, clip_cov_ub=4.0, kl_cov_ratio=0.03,
        ppo_kl_coef=0.7))
    assert lmpo_verl.resolve_hparams("sapo", cfg) == {"tau_pos": 2.0, "tau_neg": 3.0}
    assert lmpo_verl.resolve_hparams("dro", cfg) == {"beta": 0.4}
    assert lmpo_verl.resolve_hparams("clip_cov", cfg) == {
        "eps_low": 0.2, "eps_high": 0.2, "clip_cov_ratio": 0.01, "clip_cov_lb": 0.5,
        "clip_cov_ub": 4.0}
    assert lmpo_verl.resolve_hparams("kl_cov", cfg) == {"kl_cov_ratio": 0.03, "ppo_kl_coef": 0.7}


# ---------------------------------------------------------------- estimators
def outcome_batch(seed, b=12, t=7, group=4, binary=False):
    """Outcome rewards at each response's last token, groups of `group` in batch order."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).to(torch.float64)
    scores = (torch.rand(b, generator=g) < 0.5).double() if binary else \
        torch.randn(b, generator=g, dtype=torch.float64)
    rewards = torch.zeros(b, t, dtype=torch.float64)
    rewards[torch.arange(b), lengths - 1] = scores
    index = np.array([f"uid{i // group}" for i in range(b)], dtype=object)
    return rewards, mask, index


ESTIMATORS = [("reinforce_plus_plus", {}), ("reinforce_plus_plus_baseline", {}), ("opo", {}),
              ("gpg", {}), ("grpo_passk", {"norm_adv_by_std_in_grpo": True}),
              ("grpo_passk", {"norm_adv_by_std_in_grpo": False})]


@pytest.mark.parametrize("name, algo", ESTIMATORS, ids=lambda x: str(x))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("binary", [False, True])
def test_peer_estimators_equal_verl(name, algo, seed, binary):
    """verl's function and lmpo's (through the plugin, which reads verl's algorithm config)
    on the same outcome rewards, groups of one included for the baseline estimators."""
    from verl.trainer.config import AlgoConfig

    rewards, mask, index = outcome_batch(seed, binary=binary)
    if name != "grpo_passk":
        index[-1] = "alone"  # a group of one
    config = AlgoConfig(**algo)
    theirs, _ = core_algos.get_adv_estimator_fn(name)(
        token_level_rewards=rewards.clone(), response_mask=mask, index=index, config=config)
    ours, _ = lmpo_verl.make_adv_estimator(name)(rewards.clone(), mask, index, config=config)
    torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_remax_equals_verls(seed):
    """lmpo's remax (through the plugin, with the greedy scores verl's trainer passes as
    reward_baselines) against verl's compute_remax_outcome_advantage; without them the
    plugin says why."""
    rewards, mask, index = outcome_batch(seed)
    baselines = torch.randn(len(index), generator=torch.Generator().manual_seed(seed),
                            dtype=torch.float64)
    theirs, _ = core_algos.get_adv_estimator_fn("remax")(
        token_level_rewards=rewards.clone(), reward_baselines=baselines, response_mask=mask)
    ours, _ = lmpo_verl.make_adv_estimator("remax")(rewards.clone(), mask, index,
                                                    reward_baselines=baselines)
    torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=1e-12)
    with pytest.raises(ValueError, match="adv_estimator=remax"):
        lmpo_verl.make_adv_estimator("remax")(rewards.clone(), mask, index)


# ------------------------------------------- the plugin under verl's own default config
# every loss verl 0.9.1 ships that lmpo registers too: lmpo name -> verl name
VERL_PEERS = {"ppo_clip": "vanilla", "gspo": "gspo", "cispo": "cispo", "dppo_tv": "dppo_tv",
              "dppo_kl": "dppo_kl", "sapo": "sapo", "gpg": "gpg", "dro": "dro",
              "geo_mean": "geo_mean", "clip_cov": "clip_cov", "kl_cov": "kl_cov"}
REQUIRED = {"dro": {"policy_loss": PolicyLossConfig(dro_beta=0.3)}}  # verl has no default


def wide_batch(seed, b=8, t=9):
    """Log-ratios of scale 1, so that verl's default dual clip (ratio 3), DPPO's 0.2
    thresholds and every clip act; row 0 is empty."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(b, t, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    logp = (old + torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=-1e-4)
    adv = torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) < 0.8).double()
    mask[0] = 0
    weights = torch.rand(b, t, generator=g, dtype=torch.float64) * 1.5 + 0.25
    return logp, old, adv, mask, weights


def plugin_and_verl(name, cfg, mode, seed, with_weights):
    logp, old, adv, mask, w = wide_batch(seed)
    out = []
    for fn_name, fn_mode in ((f"lmpo_{name}", verl_mode(VERL_PEERS[name], mode)),
                             (VERL_PEERS[name], mode)):
        lp = logp.clone().requires_grad_(True)
        torch.manual_seed(seed)  # Clip-Cov's random selection: the same draw for both
        loss = core_algos.get_policy_loss_fn(fn_name)(
            old, lp, adv, mask, fn_mode, cfg, rollout_is_weights=w if with_weights else None)[0]
        out.append((loss, torch.autograd.grad(loss, lp)[0]))
    return out


@pytest.mark.parametrize("with_weights", [False, True], ids=["plain", "is-weights"])
@pytest.mark.parametrize("name", sorted(VERL_PEERS))
@pytest.mark.parametrize("seed", [0, 1])
def test_each_plugin_loss_equals_verls_own_under_verls_default_config(name, seed, with_weights):
    """What a verl user gets by switching `loss_mode` from verl's name to lmpo's, changing
    nothing else: verl's default ActorConfig (token-mean, clip 0.2, dual clip 3, ...),
    rollout IS weights or none, a batch with an empty row. Values and gradients."""
    import verl  # noqa: F401  (the entry point registers on import)

    cfg = actor_config(**REQUIRED.get(name, {}))
    (ours, ga), (theirs, gb) = plugin_and_verl(name, cfg, cfg.loss_agg_mode, seed, with_weights)
    torch.testing.assert_close(ours, theirs, rtol=2e-8, atol=1e-14)
    torch.testing.assert_close(ga, gb, rtol=2e-8, atol=1e-14)


@pytest.mark.parametrize("mode", list(AGG_MODES))
@pytest.mark.parametrize("name", sorted(VERL_PEERS))
def test_each_plugin_loss_equals_verls_own_in_every_mode(name, mode):
    """The same in each loss_agg_mode verl accepts: where verl's function ignores the mode
    (sapo, geo_mean) the plugin ignores it too."""
    import verl  # noqa: F401

    cfg = actor_config(**REQUIRED.get(name, {}))
    (ours, ga), (theirs, gb) = plugin_and_verl(name, cfg, mode, 2, True)
    torch.testing.assert_close(ours, theirs, rtol=2e-8, atol=1e-14)
    torch.testing.assert_close(ga, gb, rtol=2e-8, atol=1e-14)


def verl_bypass_reinforce(level, threshold, logp, old, adv, mask, mode):
    """verl's bypass_mode loss with loss_type reinforce and `level` IS truncated at
    `threshold`: (the log-probs it differentiates, its loss, its rollout correction)."""
    from verl.trainer.config import RolloutCorrectionConfig

    corr = RolloutCorrectionConfig(rollout_is=level, rollout_is_threshold=threshold,
                                   bypass_mode=True, loss_type="reinforce")
    cfg = actor_config(policy_loss=PolicyLossConfig(loss_mode="bypass_mode",
                                                    rollout_correction=corr))
    lp = logp.clone().requires_grad_(True)
    return lp, core_algos.get_policy_loss_fn("bypass_mode")(old, lp, adv, mask, mode, cfg)[0], \
        corr


@pytest.mark.parametrize("threshold", [2.0, 1.5])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum"])
def test_verls_bypass_reinforce_with_token_is_is_cispo_on_rollout_log_probs(threshold, mode):
    """verl's bypass_mode (the rollout policy as pi_old) with loss_type reinforce and
    token-level IS truncated at `threshold`: -sg(min(r, threshold)) A log pi, which is lmpo's
    cispo with eps_low 1 (no lower bound) and eps_high threshold - 1, its old_logp the
    rollout's (rollout.old_logp: rollout, lmpo's default). Values and gradients, float64."""
    logp, old, adv, mask, _ = wide_batch(3)
    lp_a, theirs, _ = verl_bypass_reinforce("token", threshold, logp, old, adv, mask, mode)
    lp_b = logp.clone().requires_grad_(True)
    tok, _ = get_loss("cispo", eps_low=1.0, eps_high=threshold - 1.0)(lp_b, old, adv, mask)
    ours = aggregate(tok, mask, mode)
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(torch.autograd.grad(ours, lp_b)[0],
                               torch.autograd.grad(theirs, lp_a)[0], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("threshold", [1.05, 2.0, 1e6])
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_verls_bypass_reinforce_with_sequence_is_is_reinforce_seq_is(threshold, mode):
    """verl's bypass_mode, loss_type reinforce, rollout_is sequence (its default level),
    directly and through the plugin (lmpo_reinforce_seq_is reads verl's rollout_is_threshold):
    values and gradients, float64. Log-ratios of scale 0.5 so that some rows' weights fall
    either side of the thresholds."""
    logp, old, adv, mask, _ = wide_batch(4)
    logp = old + 0.5 * (logp - old)
    lp_a, theirs, corr = verl_bypass_reinforce("sequence", threshold, logp, old, adv, mask,
                                               mode)
    lp_b = logp.clone().requires_grad_(True)
    tok, metrics = get_loss("reinforce_seq_is", threshold=threshold)(lp_b, old, adv, mask)
    ours = aggregate(tok, mask, mode)
    rtol = 2e-8 if mode == "seq-mean-token-mean" else 1e-12  # verl's row count + 1e-8
    torch.testing.assert_close(ours, theirs, rtol=rtol, atol=1e-14)
    torch.testing.assert_close(torch.autograd.grad(ours, lp_b)[0],
                               torch.autograd.grad(theirs, lp_a)[0], rtol=rtol, atol=1e-14)
    if threshold == 2.0:
        assert 0 < metrics["clipfrac"] < 1  # the truncation acts on some rows only
    cfg = actor_config(policy_loss=PolicyLossConfig(loss_mode="lmpo_reinforce_seq_is",
                                                    rollout_correction=corr))
    plugin = core_algos.get_policy_loss_fn("lmpo_reinforce_seq_is")(old, logp, adv, mask, mode,
                                                                    cfg)[0]
    torch.testing.assert_close(plugin, theirs.detach(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("mine,theirs", [("k1", "kl"), ("k2", "mse"), ("k3", "low_var_kl"),
                                         ("abs", "abs"), ("k1+", "k1+"),
                                         ("k3+", "low_var_kl+"), ("abs+", "abs+")])
def test_every_kl_kind_equals_verls_value_and_gradient(mine, theirs):
    """lmpo's KL kinds against verl's `core_algos.kl_penalty` under the name
    `lmpo compare --engine verl` writes for each (value and gradient, float64)."""
    from lmpo.experiments.engines.verl_launch import KL_KINDS
    from lmpo.losses import kl_penalty

    assert KL_KINDS[mine] == theirs
    g = torch.Generator().manual_seed(3)
    ref = torch.randn(4, 7, generator=g, dtype=torch.float64) - 2
    base = ref + 0.7 * torch.randn(4, 7, generator=g, dtype=torch.float64)
    outs = []
    for fn in (lambda lp: kl_penalty(lp, ref, mine),
               lambda lp: core_algos.kl_penalty(lp, ref, theirs)):
        logp = base.clone().requires_grad_(True)
        value = fn(logp)
        (grad,) = torch.autograd.grad(value.sum(), logp)
        outs.append((value.detach(), grad))
    torch.testing.assert_close(outs[0][0], outs[1][0], rtol=0, atol=1e-15)
    torch.testing.assert_close(outs[0][1], outs[1][1], rtol=0, atol=1e-15)


def test_adaptive_kl_equals_verls_controller_and_its_kl_in_reward():
    """lmpo's adaptive_kl schedule against verl's `AdaptiveKLController` on the same
    batches, the KL it observes computed as `ray_trainer.apply_kl_penalty` computes
    current_kl (verl's `kl_penalty(..., "kl")` times the mask, verl's `masked_mean` per
    response, the mean over responses; that module itself needs verl's server extras,
    not installed here), and the coefficient after each update."""
    from verl.utils import torch_functional as verl_F

    from lmpo.trainer.schedules import SCHEDULES, mean_response_kl

    theirs = core_algos.AdaptiveKLController(init_kl_coef=0.2, target_kl=0.05, horizon=64)
    mine = SCHEDULES.get("adaptive_kl", target_kl=0.05, horizon=64.0)
    mine.value = 0.2
    g = torch.Generator().manual_seed(0)
    for spread in (0.01, 0.3, 0.05, 1.0):
        b, t = 6, 7
        old = -torch.rand(b, t, generator=g, dtype=torch.float64)
        ref = old + spread * torch.randn(b, t, generator=g, dtype=torch.float64)
        mask = (torch.rand(b, t, generator=g) < 0.8).double()
        mask[0] = 0.0
        kld = core_algos.kl_penalty(old, ref, kl_penalty="kl") * mask
        current_kl = torch.mean(verl_F.masked_mean(kld, mask=mask, axis=-1), dim=0).item()
        theirs.update(current_kl=current_kl, n_steps=b)
        current = mean_response_kl(old, ref, mask, "k1")
        assert current == pytest.approx(current_kl, rel=1e-12)
        mine.update(current, b)
        assert mine.value == pytest.approx(theirs.value, rel=1e-12)
    assert mine.value != 0.2


def test_the_overlong_penalty_equals_verls_dapo_reward_manager(tiny_policy_dir):
    """lmpo.trainer.length.overlong_penalty against verl's own `DAPORewardManager` with
    `overlong_buffer` (its score function returning 0, so its reward is the penalty alone)
    on responses of every length up to the budget, EOS included in the length as verl
    counts its valid response length."""
    from types import SimpleNamespace

    import numpy as np
    from tensordict import TensorDict
    from verl import DataProto
    from verl.workers.reward_manager.dapo import DAPORewardManager

    from lmpo.models import load_policy
    from lmpo.trainer.length import overlong_penalty

    _, tok = load_policy(tiny_policy_dir)
    budget, buffer_len, factor = 12, 5, 0.7
    lengths = torch.arange(1, budget + 1)
    b, p = len(lengths), 3
    prompts = torch.full((b, p), 5)
    responses = torch.full((b, budget), 7)
    mask = torch.cat([torch.ones(b, p, dtype=torch.long),
                      (torch.arange(budget)[None] < lengths[:, None]).long()], dim=1)
    data = DataProto(batch=TensorDict({"prompts": prompts, "responses": responses,
                                       "attention_mask": mask}, batch_size=[b]),
                     non_tensor_batch={"reward_model": np.array([{"ground_truth": "1"}] * b),
                                       "data_source": np.array(["lmpo"] * b)})
    manager = DAPORewardManager(
        tokenizer=tok, num_examine=0, compute_score=lambda **_: 0.0, max_resp_len=budget,
        overlong_buffer_cfg=SimpleNamespace(enable=True, len=buffer_len,
                                            penalty_factor=factor, log=False))
    theirs = manager(data)[torch.arange(b), lengths - 1].double()
    mine = overlong_penalty(lengths, budget, buffer_len, factor)
    torch.testing.assert_close(mine, theirs, rtol=1e-6, atol=1e-7)  # verl's float32 tensor
    assert (mine < 0).sum() == buffer_len and mine[-1] == pytest.approx(-factor)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("zero_tail", [True, False])
@pytest.mark.parametrize("weights", [False, True])
def test_optimal_token_baseline_equals_verls(seed, zero_tail, weights):
    """lmpo's optimal_token_baseline against verl's compute_optimal_token_baseline_advantage
    on the same log-probs, sum pi^2 (of one softmax per position) and IS weights, groups
    of 4 of varied lengths and a group of one."""
    from lmpo.advantages import PathStats, get_advantage

    rewards, mask, index = outcome_batch(seed)
    index[-1] = "alone"
    g = torch.Generator().manual_seed(100 + seed)
    probs = (torch.randn(*mask.shape, 9, generator=g, dtype=torch.float64) * 2).softmax(-1)
    ids = torch.multinomial(probs.reshape(-1, 9), 1, generator=g).reshape(mask.shape)
    logp = probs.log().gather(-1, ids[..., None]).squeeze(-1)
    sum_sq = (probs ** 2).sum(-1)
    w = torch.rand(mask.shape, generator=g, dtype=torch.float64) + 0.5 if weights else None
    theirs, _ = core_algos.get_adv_estimator_fn("optimal_token_baseline")(
        token_level_rewards=rewards.clone(), response_mask=mask, index=index,
        old_log_probs=logp, sum_pi_squared=sum_sq, rollout_is_weights=w,
        handle_zero_tail=zero_tail)
    _, group_ids = np.unique(index.astype(str), return_inverse=True)
    ours, _ = get_advantage("optimal_token_baseline", handle_zero_tail=zero_tail)(
        rewards.sum(-1), torch.as_tensor(group_ids), paths=PathStats(logp, sum_sq, mask, w))
    torch.testing.assert_close(ours, theirs, rtol=RTOL, atol=1e-12)
