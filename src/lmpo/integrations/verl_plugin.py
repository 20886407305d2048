"""Loaded by verl through the `verl.plugins` entry point: registers lmpo's
losses and estimators in verl's registries when verl is imported."""

from lmpo.integrations.verl import register

register()
