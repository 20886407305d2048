"""The policy-loss registry (`get_loss`, `list_losses`)."""

from lmpo.registry import Registry

LOSSES = Registry("loss")
