"""Config keys of earlier lmpo versions: what replaced them, and saved configs upgraded.

A config file that still uses a replaced key fails with one line saying what replaced it
(`REPLACED`, through each config class's `replaced_keys`). A saved run's config.yaml is
upgraded instead (`upgrade_saved`): resuming a run, re-judging a finished one and
`lmpo eval --run` read configs written before the change.
"""

from __future__ import annotations

from lmpo.registry import DEFAULT_ESTIMATOR
from lmpo.rollout.controllers.registry import LEGACY_SECTION
from lmpo.rollout.controllers.registry import REPLACED as CONTROLLER_REPLACED
from lmpo.rollout.controllers.registry import upgrade_saved as upgrade_controller

ESTIMATOR_KEYS = ("gamma", "lam", "whiten")  # were advantage.KEY, now advantage.hparams.KEY
REPLACED = {
    LEGACY_SECTION: CONTROLLER_REPLACED,
    **{f"advantage.{k}": f"moved to advantage.hparams.{k} (the estimator's own "
                         "hyper-parameters)" for k in ESTIMATOR_KEYS},
    "log.or_alpha": "was replaced by log.diagnostics: {or_margin: {alpha: VALUE}} (the "
                    "parameters of every post-update diagnostic)",
}


def replaced(section: str = "") -> dict[str, str]:
    """{key: message} of the replaced keys directly under `section` ('' = the top level)."""
    prefix = f"{section}." if section else ""
    return {k[len(prefix):]: v for k, v in REPLACED.items()
            if k.startswith(prefix) and "." not in k[len(prefix):]}


def upgrade_saved(data: dict) -> dict:
    """A saved run config (a mapping) with every replaced key rewritten as today's."""
    from lmpo.advantages import advantage_hparams, list_advantages

    data = upgrade_controller(dict(data))
    advantage = dict(data.get("advantage") or {})
    moved = {k: advantage.pop(k) for k in ESTIMATOR_KEYS if k in advantage}
    if moved:
        name = advantage.get("name", DEFAULT_ESTIMATOR)
        takes = advantage_hparams(name) if name in list_advantages() else {}
        advantage["hparams"] = {k: v for k, v in moved.items() if k in takes} \
            | dict(advantage.get("hparams") or {})
        data["advantage"] = advantage
    log = dict(data.get("log") or {})
    if log and "eval_stream" not in log:  # saved before per-problem evaluation streams
        log["eval_stream"] = "shared"
        data["log"] = log
    if "or_alpha" in log:
        alpha = log.pop("or_alpha")
        if alpha is not None:
            log["diagnostics"] = {"or_margin": {"alpha": alpha}} | dict(log.get("diagnostics")
                                                                        or {})
        data["log"] = log
    return data
