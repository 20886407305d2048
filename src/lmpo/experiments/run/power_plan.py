"""The power plan from a source's rows (`lmpo.experiments.design.power` says what it is):
each headline claim's per-seed statistic read from the source sweep, its SD's upper bound,
the MDE at each look, and the up-front refusal."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmpo.errors import ConfigError
from lmpo.experiments.design.power import headline_claims, look_sizes_of, sd_upper
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.seeds import ALPHA


def source_arm(data: dict, name: str, arms: dict) -> str | None:
    mapped = arms.get(name, name)
    names = {arm for arm, _ in data["runs"]}
    return next((n for n in (mapped, *sorted(n for n in names if n.startswith(mapped + "@")))
                 if n in names), None)


def source_statistic(data: dict, claim: dict, arms: dict) -> np.ndarray | None:
    """The claim's per-seed statistic over the source's seeds that finished both arms."""
    from lmpo.experiments.report.readings import seed_values

    kind = claim_kind(claim["kind"])
    names = [source_arm(data, a, arms) for a in claim["arms"]]
    if kind.over_levels or kind.mde_is_ratio or len(names) > 2 or None in names:
        return None
    values = [seed_values(data, n, claim["metric"], claim.get("reduce", "final"),
                          int(claim.get("k", 20))) for n in names]
    seeds = sorted(set.intersection(*(set(v) for v in values)))
    if len(seeds) < 3:
        return None
    a = np.array([values[0][s] for s in seeds])
    b = np.array([values[-1][s] for s in seeds]) if len(values) == 2 else a
    return kind.per_seed(claim, a, b)


def plan_power(exp, source: str | None = None, arms: dict | None = None,
               data: dict | None = None) -> list[dict]:
    """Per headline claim: the source's SD, its upper bound and the MDE at every look
    (`data`: the source already collected)."""
    from lmpo.experiments.design.sequential import nominal
    from lmpo.experiments.report.write import collect

    spec = exp.power or {}
    root = Path(source or spec["source"])
    arms = spec.get("arms", {}) if arms is None else arms
    if data is None and not (root / "experiment.yaml").exists():
        raise ConfigError(f"power source {root} is not a sweep directory (no experiment.yaml)")
    data = collect(root) if data is None else data
    claims = headline_claims(exp)
    sizes = look_sizes_of(exp)
    r = max(1, len(claims))
    levels = nominal(tuple(sizes), ALPHA / r) if exp.design else (ALPHA / r,)
    plan = []
    for claim in claims:
        kind = claim_kind(claim["kind"])
        entry = {"sentence": claim["sentence"], "min_effect": claim.get("min_effect"),
                 "source": str(root), "exploratory": bool(claim.get("exploratory"))}
        x = source_statistic(data, claim, arms)
        if x is None:
            plan.append(entry | {"status": "not planned (no source rows for its arms, or a "
                                           f"{claim['kind']} claim)"})
            continue
        sd = float(x.std(ddof=1))
        upper = sd_upper(sd, x.size)
        looks = [{"n": n, "alpha": float(a),
                  "mde": kind.mde_for(claim.get("expect"), upper, n, kind.labelling_level(a))}
                 for n, a in zip(sizes, levels, strict=True)]
        short = entry["min_effect"] is not None and looks[-1]["mde"] > entry["min_effect"]
        status = ("exploratory (planned underpowered)" if entry["exploratory"] else "refused") \
            if short else "planned"
        plan.append(entry | {"n_source": int(x.size), "sd": sd, "sd_upper": upper,
                             "looks": looks, "status": status})
    return plan


def check_power(exp) -> None:
    """Refuse (one line) an experiment whose declared source leaves a headline claim
    unable to reach its min_effect at the largest seed count."""
    if not exp.power:
        return
    for p in plan_power(exp):
        if p["status"] == "refused":
            last = p["looks"][-1]
            raise ConfigError(
                f"{exp.name}: the headline claim \"{p['sentence']}\" cannot detect min_effect "
                f"{p['min_effect']:g} at {last['n']} seeds (MDE {last['mde']:.3g}, planned "
                f"with the SD's 80% upper bound {p['sd_upper']:.3g} from {p['n_source']} seeds "
                f"of {p['source']}); add seeds, or mark the claim `exploratory: true`")


def power_lines(exp, plan: list[dict]) -> list[str]:
    lines = [f"power plan for {exp.name} (80% power; SD at its 80% upper bound):"]
    for p in plan:
        if "looks" not in p:
            lines.append(f"- {p['sentence']}: {p['status']}")
            continue
        looks = ", ".join(f"{x['n']} seeds MDE {x['mde']:.3g} (alpha {x['alpha']:.3g})"
                          for x in p["looks"])
        bound = f"min_effect {p['min_effect']:g}" if p["min_effect"] is not None else \
            "no min_effect"
        lines.append(f"- {p['sentence']}: SD {p['sd']:.3g} (upper {p['sd_upper']:.3g}, "
                     f"{p['n_source']} source seeds); {looks}; {bound}: {p['status']}")
    return lines
