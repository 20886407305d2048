"""Errors the command line reports as one line (exit code 2)."""


class ConfigError(ValueError):
    """A config, preset or setting that cannot be used; the message names it."""
