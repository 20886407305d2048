"""lmpo inside verl: every lmpo loss and estimator in verl's own registries.

Installing lmpo with the `verl` extra registers, through verl's `verl.plugins`
entry point, every loss as `lmpo_<name>` (verl's policy-loss signature) and
every estimator as `lmpo_<name>` (verl's advantage-estimator signature). Select
them with `actor_rollout_ref.actor.policy_loss.loss_mode=lmpo_cegppo` and
`algorithm.adv_estimator=lmpo_ebpo`; hyper-parameters go in
`actor_rollout_ref.actor.policy_loss.hparams` once `policy_loss._target_` points
at `LmpoPolicyLossConfig` (verl's own config class rejects unknown keys).
See docs/verl.md.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch

from lmpo.advantages import (
    advantage_meta,
    estimator_peer_hparams,
    get_advantage,
    group_estimators,
)
from lmpo.integrations.settings import setting, setting_path
from lmpo.losses import get_loss, list_losses, loss_meta, peer_hparams

PREFIX = "lmpo_"

_ESTIMATORS: dict[str, Any] = {}  # driver-process state (EBPO's Welford accumulators)


def resolve_hparams(name: str, config) -> dict:
    """lmpo hyper-parameters for `name` from a verl actor config: `policy_loss.hparams`,
    over the verl settings the loss declares for them (`peer_keys["verl"]`, dotted paths
    in the actor config: e.g. the clip knobs clip_ratio_low/high, which mean the same in
    both libraries, or Clip-Cov's policy_loss.clip_cov_ratio)."""
    policy_loss = setting(config, "policy_loss")
    explicit = dict(setting(policy_loss, "hparams", None) or {})
    return peer_hparams(name, "verl", lambda key: setting_path(config, key)) | explicit


def make_policy_loss(name: str):
    """verl-signature wrapper around lmpo loss `name`."""
    from verl.trainer.ppo.core_algos import agg_loss

    meta = loss_meta(name)
    clipfrac = meta["clipfrac"]  # the loss's own clip-fraction metric
    fixed_agg = meta["peer_agg"].get("verl")  # where verl's own function ignores the mode

    def policy_loss(old_log_prob, log_prob, advantages, response_mask,
                    loss_agg_mode: str = "token-mean", config=None, rollout_is_weights=None):
        fn = get_loss(name, **resolve_hparams(name, config))
        loss_tok, metrics = fn(log_prob, old_log_prob, advantages, response_mask)
        if fixed_agg == "row-mean":
            loss = row_mean(loss_tok, response_mask, rollout_is_weights)
        else:
            if rollout_is_weights is not None:
                loss_tok = loss_tok * rollout_is_weights
            batch_info = dict(setting(config, "global_batch_info", None) or {})
            loss = agg_loss(loss_mat=loss_tok, loss_mask=response_mask,
                            loss_agg_mode=fixed_agg or loss_agg_mode, **batch_info)
        out = {f"actor/lmpo/{k}": v for k, v in metrics.items()}
        out["actor/pg_clipfrac"] = metrics.get(clipfrac, 0.0)
        out["actor/ppo_kl"] = metrics["approx_kl"]
        return loss, out

    policy_loss.__name__ = f"{PREFIX}{name}"
    return policy_loss


def row_mean(loss_tok: torch.Tensor, mask: torch.Tensor, is_weights=None) -> torch.Tensor:
    """verl's reduction for a per-sequence loss (its geo_mean): each row's loss (the sum of
    a per-token loss that spreads it evenly over the row's tokens; 0 for an empty row),
    times the geometric mean of the row's rollout IS weights, averaged over every row of
    the micro-batch (torch.mean: no data-parallel or global-batch scaling)."""
    rows = (loss_tok * mask).sum(dim=-1)
    if is_weights is not None:
        n = mask.sum(dim=-1)
        rows = rows * torch.exp((torch.log(is_weights + 1e-10) * mask).sum(dim=-1) / (n + 1e-8))
    return rows.mean()


def estimator_instance(name: str, hparams: dict | None = None):
    """The driver-process instance of estimator `name` with `hparams` (stateful for EBPO)."""
    hparams = dict(hparams or {})
    if name not in _ESTIMATORS or _ESTIMATORS[name][0] != hparams:
        _ESTIMATORS[name] = (hparams, get_advantage(name, **hparams))
    return _ESTIMATORS[name][1]


def make_adv_estimator(name: str):
    """verl-signature wrapper: outcome scores -> lmpo estimator -> per-token advantages.
    The estimator's verl settings (`peer_keys["verl"]`, e.g. grpo_passk's
    norm_adv_by_std_in_grpo) come from verl's algorithm config."""

    def adv_estimator(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                      index: np.ndarray, epsilon: float = 1e-6, config=None, **kwargs):
        scores = token_level_rewards.sum(dim=-1)
        _, group_ids = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
        hparams = estimator_peer_hparams(name, "verl", lambda key: setting(config, key))
        est = estimator_instance(name, hparams)
        meta = advantage_meta(name)
        extra = {"lengths": response_mask.sum(-1)} if meta["wants_lengths"] else {}
        if meta["wants_baselines"]:  # ReMax: verl's trainer passes its greedy responses' scores
            if kwargs.get("reward_baselines") is None:
                raise ValueError(f"{PREFIX}{name} needs each prompt's greedy-response score "
                                 "(reward_baselines), which the engine did not pass: verl's "
                                 "trainer decodes them only for algorithm.adv_estimator=remax, "
                                 "verl's own remax (equal to lmpo's, tests/test_verl_peers.py)")
            extra["baselines"] = kwargs["reward_baselines"].to(scores.dtype)
        with torch.no_grad():
            adv, _ = est(scores, torch.as_tensor(group_ids, dtype=torch.long), **extra)
        adv = adv.to(token_level_rewards.dtype)[:, None] * response_mask
        return adv, adv

    adv_estimator.__name__ = f"{PREFIX}{name}"
    return adv_estimator


def estimator_state() -> dict:
    """State of the driver's stateful estimators, to save next to a verl checkpoint."""
    return {name: est.state_dict() for name, (_, est) in _ESTIMATORS.items()}


def load_estimator_state(state: dict) -> None:
    for name, sd in state.items():
        estimator_instance(name).load_state_dict(sd)


def register() -> None:
    """Add every lmpo loss and estimator to verl's registries (idempotent)."""
    from verl.trainer.ppo import core_algos

    for name in list_losses():
        key = PREFIX + name
        if key not in core_algos.POLICY_LOSS_REGISTRY:
            core_algos.register_policy_loss(key)(make_policy_loss(name))
    for name in group_estimators():  # verl brings its own GAE
        key = PREFIX + name
        if key not in core_algos.ADV_ESTIMATOR_REGISTRY:
            core_algos.register_adv_est(key)(make_adv_estimator(name))


def _policy_loss_config_class():
    from verl.workers.config.actor import PolicyLossConfig

    @dataclasses.dataclass
    class LmpoPolicyLossConfig(PolicyLossConfig):
        """verl's PolicyLossConfig plus `hparams`: lmpo hyper-parameters by name."""

        hparams: dict = dataclasses.field(default_factory=dict)

    LmpoPolicyLossConfig.__module__ = __name__
    return LmpoPolicyLossConfig


def __getattr__(attr: str):
    if attr == "LmpoPolicyLossConfig":
        cls = _policy_loss_config_class()
        globals()["LmpoPolicyLossConfig"] = cls
        return cls
    raise AttributeError(attr)
