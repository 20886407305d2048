"""Which metrics show an arm's own mechanism: read from the registries' metadata."""

from __future__ import annotations


def method_diagnostics(cfg: dict) -> list[str]:
    """The metrics that show an arm's own mechanism (registry metadata `diagnostics`)."""
    from lmpo.advantages import advantage_meta
    from lmpo.losses.registry import LOSSES
    from lmpo.rollout import CONTROLLERS

    keys = list(LOSSES.meta(cfg["loss"]["name"]).get("diagnostics", ()))
    keys += advantage_meta(cfg["advantage"]["name"]).get("diagnostics", ())
    espo = cfg.get("espo", {})
    if espo.get("enabled"):
        name = "random_stop" if espo.get("mode") == "random" else "espo"
        keys += CONTROLLERS.meta(name).get("diagnostics", ())
    return list(dict.fromkeys(keys))
