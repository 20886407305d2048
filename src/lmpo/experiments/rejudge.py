"""Re-judging a committed report by today's rules, from the numbers it holds.

A committed report.json keeps, per claim, its effect, its 95% and Holm-adjusted intervals,
its p value, its MDE and its seed count, and, in its setup, the config keys its arms
differ in and the arms' effective behaviour. That is enough to apply today's rules
(docs/reproductions.md) without re-running anything:

- the label comes from the Holm-adjusted interval (the 95% interval stays beside it), and
  the MDE that decides "underpowered" is taken at the same level;
- engagement is "not measured" (the runs predate same-batch comparators), so no claim is
  "not engaged"; fixed engagement levels without a source are withdrawn;
- config confounds still override every label; effective differences confound only
  outside the treatment's mediators (the claim's and its differing parts' `mediates`).

Every label that changes carries `rejudged` (the earlier label) and reads "re-judged
(exploratory)": these rules were written after those intervals were seen.

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
from lmpo.experiments.claims import arm_pairs, describe_claim, mediators
from lmpo.experiments.engagement import DEFAULT_FLOOR, not_measured, part_mediators
from lmpo.experiments.spec import load_experiment
from lmpo.experiments.stats import (
    LEVEL,
    WEAK,
    effective_flags,
    mde_for,
    power_ncp,
    underpowered,
    verdict,
)
from lmpo.legacy import upgrade_saved

NOTE = ("Re-judged with lmpo {version} from this report's own numbers by the rules of "
        "docs/reproductions.md: labels from the Holm-adjusted intervals (MDE at the same "
        "level), engagement not measured (these runs predate same-batch comparators; the "
        "earlier fixed engagement levels had no source and are withdrawn), effective "
        "differences confound only outside the treatment's mediators. A changed label reads "
        "'re-judged (exploratory)': the rules were written after these intervals were seen.")


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


def mde_at(kind: str, claim: dict, old: dict, level: float) -> float:
    """The claim's MDE at `level`, from the one its report gives at 95% (same per-seed sd)."""
    n, m95 = int(old["n"]), old.get("mde", math.nan)
    if n < 2 or m95 is None or math.isnan(m95):
        return math.nan
    if kind == "spread":
        return mde_for(kind, claim.get("expect"), 0.0, n, level)
    from scipy import stats as sps

    if kind == "equivalence":
        sd = m95 * math.sqrt(n) / float(sps.t.ppf(1 - (1 - LEVEL) / 2, n - 1))
    else:
        sd = m95 * math.sqrt(n) / power_ncp(n - 1, LEVEL)
    return mde_for(kind, claim.get("expect"), sd, n, level)


def rejudge_claim(claim: dict, old: dict, exp, flats: dict, means: dict) -> dict:
    """One committed claim's numbers under today's rules."""
    kind = claim["kind"]
    result = {k: v for k, v in old.items() if k not in ("engaged", "rejudged")}
    result |= {"engagement": not_measured("the runs predate same-batch comparators"),
               "role": "headline", "level": None, "engaged": []}
    if old["verdict"] == "insufficient seeds" or not old.get("ci_holm"):
        return result | {"verdict": old["verdict"]}
    level = float(old.get("holm_level", LEVEL))
    base = verdict(kind, claim, old["effect"], *old["ci_holm"])
    m = mde_at(kind, claim, old, level)
    result |= {"mde": m, "first": base}
    keys = config_confounds(claim, exp.differs_in, flats)
    allowed = set(mediators(claim))
    for x, y in arm_pairs(claim):
        allowed |= set(part_mediators(flats.get(x, {}), flats.get(y, {})))
    flags = effective_flags(arm_pairs(claim), means, sorted(allowed), exp.effective_tolerance)
    if keys:
        return result | {"verdict": "confounded", "reason": "config: " + ", ".join(keys)}
    if flags:
        return result | {"verdict": "confounded", "reason": "effective: " + "; ".join(flags)}
    limit = underpowered(kind, claim, m)
    if base in WEAK and limit is not None:
        return result | {"verdict": "underpowered",
                         "reason": f"MDE {m:.3g} > min_effect {limit:.3g}" if kind != "spread"
                         else f"MDE ratio {m:.3g} vs min_effect {limit:.3g}"}
    return result | {"verdict": base, "reason": f"MDE {m:.3g}"}


def rejudge(folder: str | Path, experiment: str | Path) -> Path:
    """Rewrite `folder`'s report.json and report.md with its claims judged by today's
    rules from the numbers it holds; a changed label keeps the earlier one in `rejudged`."""
    from lmpo.experiments.report import SCHEMA_VERSION
    from lmpo.experiments.results import load, rendered

    folder = Path(folder)
    rep, exp = load(folder), load_experiment(experiment)
    old = rep["claims"]
    if len(old) != len(exp.claims) or any(
            o["claim"] != describe_claim(c) for o, c in zip(old, exp.claims, strict=True)):
        raise ConfigError(f"{experiment}'s claims are not the ones {folder} judged: the claims "
                          "may gain fields (differs_in, min_effect, ...) but not change")
    flats = arm_differences(rep["setup"])
    means = {arm: {k: v["mean"] for k, v in q.items()}
             for arm, q in (rep["setup"].get("effective") or {}).items()}
    results = []
    for claim, first in zip(exp.claims, old, strict=True):
        result = rejudge_claim(claim, first, exp, flats, means)
        earlier = first.get("rejudged", first["verdict"])
        if result["verdict"] != earlier:
            result["rejudged"] = earlier
        results.append(result)
    rep["claims"] = results
    rep["schema_version"] = SCHEMA_VERSION
    rep["setup"]["engaged_floor"] = DEFAULT_FLOOR
    note = NOTE.format(version=__version__)
    rep["setup"]["notes"] = [n for n in rep["setup"].get("notes", [])
                             if not n.startswith("Re-judged with lmpo")] + [note]
    (folder / "report.json").write_text(json.dumps(rep, indent=2, default=str) + "\n")
    (folder / "report.md").write_text(rendered(rep))
    return folder / "report.md"
