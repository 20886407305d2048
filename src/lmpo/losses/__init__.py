"""The objective library: every policy loss, the KL estimators and `aggregate`.

    loss_fn = get_loss("cegppo", beta1=0.5)
    loss_tok, metrics = loss_fn(logp, old_logp, adv, mask)   # [B, T], dict
    loss = aggregate(loss_tok, mask, "token-mean", num_tokens=global_tokens)
"""

from lmpo.losses import divergence, gppo, output_reset, ppo  # noqa: F401  (registers)
from lmpo.losses.base import OR_MARGIN, displacement_metrics
from lmpo.losses.kl import KL_KINDS, kl_penalty
from lmpo.losses.registry import LOSSES
from lmpo.losses.value import value_loss
from lmpo.masked import AGG_MODES, aggregate


def get_loss(name: str, **hparams):
    """Loss `name` with `hparams` bound: `fn(logp, old_logp, adv, mask) -> (loss_tok, metrics)`."""
    return LOSSES.get(name, **hparams)


def list_losses() -> list[str]:
    return LOSSES.names()


def loss_hparams(name: str) -> dict:
    """Hyper-parameters of loss `name` and their defaults."""
    return LOSSES.hparams(name)


def default_aggregation(name: str) -> str:
    """The aggregation mode the method's paper uses."""
    return LOSSES.meta(name)["default_agg"]


__all__ = [
    "AGG_MODES", "KL_KINDS", "OR_MARGIN", "aggregate", "default_aggregation",
    "displacement_metrics", "get_loss", "kl_penalty", "list_losses", "loss_hparams",
    "value_loss",
]
