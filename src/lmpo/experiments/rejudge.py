"""Re-judging a committed report by today's rules, from what it holds.

A committed report keeps its setup (the arms' differing config keys) and, per arm, the
per-seed values of its table's metrics, but not its runs' per-step logs. So the config
audit can be re-done (a claim whose arms differ outside its `differs_in` is confounded,
whatever its numbers), and a claim's interval is recomputed by the paired t rule where
its metric is in the table; every other verdict needs the effective-behaviour and
engagement logs a second-edition run writes: it reads "not re-judged: needs a re-run
(second edition)", with the first edition's verdict beside it.

    lmpo report experiments/results/drpo --rejudge experiments/drpo.yaml
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lmpo import __version__
from lmpo.config import flat_config
from lmpo.errors import ConfigError
from lmpo.experiments.audit import config_confounds
from lmpo.experiments.claims import claim_values, describe_claim
from lmpo.experiments.spec import load_experiment
from lmpo.experiments.stats import holm_intervals, judge
from lmpo.legacy import upgrade_saved

NOT_REJUDGED = "needs a re-run (second edition)"


def table_values(arms: dict, claim: dict) -> dict[str, dict[int, float]] | None:
    """{arm: {seed: value}} of the claim's metric and reduction from the report's per-arm
    table, or None when the table does not hold them."""
    reduce, k = claim.get("reduce", "final"), int(claim.get("k", 20))
    if k != 20 and reduce not in ("final", "max", "min"):
        return None
    out = {}
    for arm in claim["arms"]:
        entry = next((e for e in arms.get(arm, {}).values()
                      if e.get("metric") == claim["metric"] and e.get("reduce") == reduce),
                     None)
        if entry is None:
            return None
        out[arm] = dict(zip(entry["seeds"], entry["values"], strict=True))
    return out


def arm_differences(setup: dict) -> dict[str, dict]:
    """{arm: {key: value}} of the keys a report's arms differ in, upgraded to today's keys
    (`lmpo.legacy`: a first-edition `espo.*` is `controller.*` now)."""
    nested: dict[str, dict] = {a: {} for a in setup["arms"]}
    for key, per_arm in setup["differences"].items():
        for arm, value in per_arm.items():
            node = nested.setdefault(arm, {})
            *path, last = key.split(".")
            for part in path:
                node = node.setdefault(part, {})
            node[last] = value
    return {arm: flat_config(upgrade_saved(tree)) for arm, tree in nested.items()}


def rejudge(folder: str | Path, experiment: str | Path) -> Path:
    """Rewrite `folder`'s report.json and report.md with the experiment file's claims judged
    by today's rules where the committed data allow."""
    from lmpo.experiments.results import load, rendered

    folder = Path(folder)
    rep, exp = load(folder), load_experiment(experiment)
    old = rep["claims"]
    if len(old) != len(exp.claims) or any(
            o["claim"] != describe_claim(c) for o, c in zip(old, exp.claims, strict=True)):
        raise ConfigError(f"{experiment}'s claims are not the ones {folder} judged: the claims "
                          "may gain fields (differs_in, min_effect, ...) but not change")
    flats = arm_differences(rep["setup"])
    results, values = [], []
    for claim, first in zip(exp.claims, old, strict=True):
        keys = config_confounds(claim, exp.differs_in, flats)
        per_arm = table_values(rep["arms"], claim)
        result = dict(first)
        if per_arm is not None:
            seeds, a, b = claim_values(claim, per_arm, exp.seeds)
            result |= judge(claim, a, b)
            values.append((claim, a, b))
        else:
            values.append((claim, [math.nan], None))
            result |= {"p": math.nan, "mde": math.nan, "min_effect": claim.get("min_effect"),
                       "paper_effect": claim.get("paper_effect")}
        if keys:
            result |= {"verdict": "confounded", "reason": "config: " + ", ".join(keys)}
        else:
            result |= {"verdict": "not re-judged",
                       "reason": f"{NOT_REJUDGED}; first edition: {first['verdict']}"}
        result["first"] = first["verdict"]
        results.append(result)
    holm_intervals(results, values)
    rep["claims"] = results
    rep["setup"]["notes"] = [*rep["setup"].get("notes", []), (
        f"Re-judged with lmpo {__version__} from this report's own data: config confounds "
        "from the arms' resolved configs, intervals by the paired t rule where the table "
        f"holds the claim's per-seed values; the other verdicts say '{NOT_REJUDGED}' (the "
        "runs predate the effective-behaviour and engagement logs).")]
    (folder / "report.json").write_text(json.dumps(rep, indent=2, default=str) + "\n")
    (folder / "report.md").write_text(rendered(rep))
    return folder / "report.md"
