"""Which metrics show an arm's own mechanism: read from the registries' metadata."""

from __future__ import annotations


def method_diagnostics(cfg: dict) -> list[str]:
    """The metrics that show an arm's own mechanism: the `diagnostics` metadata of the loss,
    the estimator and the rollout controller its (saved, upgraded) config names."""
    from lmpo.advantages import advantage_meta
    from lmpo.losses import loss_meta
    from lmpo.rollout import CONTROLLERS

    keys = list(loss_meta(cfg["loss"]["name"])["diagnostics"])
    keys += advantage_meta(cfg["advantage"]["name"])["diagnostics"]
    controller = (cfg.get("controller") or {}).get("name", "none")
    keys += CONTROLLERS.meta(controller)["diagnostics"]
    return list(dict.fromkeys(keys))
