"""The objective library: every policy loss, the KL estimators and `aggregate`.

    loss_fn = get_loss("cegppo", beta1=0.5)
    loss_tok, metrics = loss_fn(logp, old_logp, adv, mask)   # [B, T], dict
    loss = aggregate(loss_tok, mask, "token-mean", num_tokens=global_tokens)
"""

import functools
import importlib
import pkgutil

from lmpo.losses.base import OR_MARGIN, check_inputs, displacement_metrics
from lmpo.losses.centering import centered_term, centering_coefficients
from lmpo.losses.kl import KL_KINDS, kl_penalty
from lmpo.losses.masks import binary_divergence, off_policy_sequence_mask, sequence_divergence_mask
from lmpo.losses.registry import LOSSES
from lmpo.losses.value import value_loss
from lmpo.masked import AGG_MODES, aggregate

for _module in pkgutil.iter_modules(__path__):  # every loss file registers itself
    importlib.import_module(f"{__name__}.{_module.name}")


def loss_meta(name: str) -> dict:
    """Registration metadata of loss `name` (`lmpo.losses.registry`)."""
    return LOSSES.meta(name)


def peer_hparams(name: str, peer: str, lookup) -> dict:
    """Hyper-parameters of loss `name` taken from a peer engine's settings: for each one
    the loss declares under `peer_keys[peer]`, the first of its peer keys whose
    `lookup(key)` is not None (numbers as floats)."""
    out = {}
    for hparam, keys in loss_meta(name)["peer_keys"].get(peer, {}).items():
        for key in (keys,) if isinstance(keys, str) else keys:
            value = lookup(key)
            if value is not None:
                is_number = isinstance(value, int | float) and not isinstance(value, bool)
                out[hparam] = float(value) if is_number else value
                break
    return out


def get_loss(name: str, validate: bool = False, **hparams):
    """Loss `name` with `hparams` bound: `fn(logp, old_logp, adv, mask) -> (loss_tok, metrics)`.
    `validate=True` checks every call's inputs first (`check_inputs`: non-finite values on
    valid tokens, a mask outside {0, 1}, non-float tensors), one clear error each."""
    fn = LOSSES.get(name, **hparams)
    if not validate:
        return fn

    def checked(logp, old_logp, adv, mask):
        check_inputs(logp, old_logp, adv, mask)
        return fn(logp, old_logp, adv, mask)

    return functools.update_wrapper(checked, fn)


def list_losses() -> list[str]:
    return LOSSES.names()


def loss_hparams(name: str) -> dict:
    """Hyper-parameters of loss `name` and their defaults."""
    return LOSSES.hparams(name)


def default_aggregation(name: str) -> str:
    """The aggregation mode the method's paper uses."""
    return LOSSES.meta(name)["default_agg"]


__all__ = [
    "AGG_MODES", "KL_KINDS", "OR_MARGIN", "aggregate", "check_inputs", "default_aggregation",
    "displacement_metrics", "get_loss", "kl_penalty", "list_losses", "loss_hparams", "loss_meta",
    "off_policy_sequence_mask", "sequence_divergence_mask", "binary_divergence", "peer_hparams",
    "value_loss", "centered_term", "centering_coefficients",
]
