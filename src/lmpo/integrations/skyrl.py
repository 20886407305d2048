"""lmpo inside SkyRL: every lmpo loss and estimator in SkyRL's own registries.

    from lmpo.integrations.skyrl import register
    register()   # in the driver before the trainer starts (SkyRL syncs its registries to
                 # Ray workers through its registry actor)

Then `trainer.algorithm.policy_loss_type=lmpo_cegppo`,
`trainer.algorithm.advantage_estimator=lmpo_ebpo`, and lmpo hyper-parameters in
`+trainer.algorithm.lmpo_hparams.beta1=0.5`. A hyper-parameter not set there comes from
the SkyRL setting the loss declares (`peer_keys["skyrl"]`: the clip knobs
eps_clip_low / eps_clip_high, SAPO's sapo.tau_pos, ...). The per-token loss is reduced
by SkyRL's own `reduce_loss` with its `loss_reduction` (token_mean, sequence_mean,
seq_mean_token_sum_norm) and `max_seq_len`, and multiplied by SkyRL's truncated
importance weights when `use_tis` is on, as SkyRL's PPO loss does. Written against
skyrl-train 0.3.1 (`make test-skyrl`); see docs/skyrl.md.
"""

from __future__ import annotations

import torch

from lmpo.advantages import group_estimators
from lmpo.integrations.settings import setting, setting_path
from lmpo.integrations.verl import make_adv_estimator
from lmpo.losses import get_loss, list_losses, loss_meta, peer_hparams

PREFIX = "lmpo_"


def resolve_hparams(name: str, config) -> dict:
    """`algorithm.lmpo_hparams` over the SkyRL settings loss `name` declares."""
    explicit = dict(setting(config, "lmpo_hparams", None) or {})
    return peer_hparams(name, "skyrl", lambda key: setting_path(config, key)) | explicit


def make_policy_loss(name: str):
    """SkyRL-signature wrapper around lmpo loss `name`: returns (loss, clip ratio)."""
    from skyrl_train.utils.ppo_utils import reduce_loss

    clipfrac = loss_meta(name)["clipfrac"]

    def policy_loss(log_probs, old_log_probs, advantages, config, loss_mask=None,
                    rollout_logprobs=None):
        mask = torch.ones_like(log_probs) if loss_mask is None else loss_mask
        fn = get_loss(name, **resolve_hparams(name, config))
        loss_tok, metrics = fn(log_probs, old_log_probs, advantages, mask)
        if setting(config, "use_tis", False):  # as SkyRL's ppo_policy_loss
            log_w = (old_log_probs - rollout_logprobs).to(torch.float32).clamp(-20.0, 20.0)
            loss_tok = loss_tok * log_w.exp().to(log_probs.dtype).clamp(
                max=setting(config, "tis_imp_ratio_cap"))
        loss = reduce_loss(loss_tok, mask, setting(config, "loss_reduction"),
                           setting(config, "max_seq_len"))
        return loss, float(metrics.get(clipfrac, 0.0))

    policy_loss.__name__ = f"{PREFIX}{name}"
    return policy_loss


def register() -> None:
    """Add every lmpo loss and group estimator to SkyRL's registries (idempotent)."""
    from skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry, PolicyLossRegistry

    losses = set(PolicyLossRegistry.list_available())
    for name in list_losses():
        if PREFIX + name not in losses:
            PolicyLossRegistry.register(PREFIX + name, make_policy_loss(name))
    estimators = set(AdvantageEstimatorRegistry.list_available())
    for name in group_estimators():  # SkyRL brings its own GAE
        if PREFIX + name not in estimators:
            AdvantageEstimatorRegistry.register(PREFIX + name, make_adv_estimator(name))
