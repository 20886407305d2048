"""A condition axis: one stress applied to every arm alike, at levels of a numeric dose.

    conditions:
      axis: staleness                      # what is manipulated (a name for the report)
      levels:
        L0: {dose: 0}                      # the paper's own recipe, scaled to the testbed
        L1: {dose: 2, rollout: {staleness: 2}}
        L2: {dose: 8, rollout: {staleness: 8}}

Each level is a dose (a number on the manipulated quantity's scale) and config overrides
applied to every arm at that level, over the arm's own overrides (an arm may not set a
key its levels set). `lmpo compare` runs arms x levels x seeds as the arms `<arm>@<level>`
(run directories `runs/<arm>@<level>/seed<k>`); the first level listed is L0, where the
claims' labels are given.

Claims in an experiment with conditions name the experiment's arms; `at:` picks the
levels a claim is judged at (a level, a list, or `all`, the default). A claim at a level
other than L0 is descriptive. A `dose_response` claim reads the pair's effect at every
level and judges its trend over the doses (`lmpo.experiments.design.dose`).
"""

from __future__ import annotations

from lmpo.config import flatten
from lmpo.errors import ConfigError
from lmpo.experiments.design.names import check_name

ALL = "all"


def check_conditions(spec, where: str) -> dict:
    """{axis, levels: {name: {dose: float, overrides: dict}}} (in order), or {}."""
    if not spec:
        return {}
    if not isinstance(spec, dict) or set(spec) != {"axis", "levels"}:
        raise ConfigError(f"{where}: conditions is {{axis: NAME, levels: {{L0: {{dose: N, "
                          f"...overrides}}, ...}}}}, got {spec!r}")
    levels = spec["levels"]
    if not isinstance(levels, dict) or not levels:
        raise ConfigError(f"{where}: conditions.levels must map level names to "
                          "{dose, ...overrides}")
    out = {}
    for name, level in levels.items():
        at = f"{where}: conditions.levels.{name}"
        check_name(name, "a level", where)
        if not isinstance(level, dict) or "dose" not in level:
            raise ConfigError(f"{at} needs a numeric dose, got {level!r}")
        dose = level["dose"]
        if isinstance(dose, bool) or not isinstance(dose, int | float):
            raise ConfigError(f"{at}: dose must be a number, got {dose!r}")
        out[str(name)] = {"dose": float(dose),
                          "overrides": {k: v for k, v in level.items() if k != "dose"}}
    doses = [lv["dose"] for lv in out.values()]
    if len(set(doses)) != len(doses):
        raise ConfigError(f"{where}: conditions.levels repeat a dose: {doses}")
    return {"axis": str(spec["axis"]), "levels": out}


def level_names(conditions: dict) -> list[str]:
    return list(conditions.get("levels") or {})


def run_arm(arm: str, level: str | None) -> str:
    """The name a run carries: `arm@level`, or the arm's own without conditions."""
    return arm if level is None else f"{arm}@{level}"


ONCE = "once"  # an arm's `levels: once`


def name_at(arm: str, level: str | None, once) -> str:
    """The run arm standing for `arm` at `level`: itself where it runs once."""
    return arm if arm in once else run_arm(arm, level)


def split_arm(name: str) -> tuple[str, str | None]:
    arm, _, level = name.partition("@")
    return arm, level or None


def claim_levels(claim: dict, conditions: dict, where: str) -> list[str | None]:
    """The levels a (non-dose_response) claim is judged at: [None] without conditions."""
    names = level_names(conditions)
    at = claim.get("at", ALL)
    if not names:
        if "at" in claim:
            raise ConfigError(f"{where}: `at` needs the experiment's conditions")
        return [None]
    chosen = names if at == ALL else [at] if isinstance(at, str) else at
    if not isinstance(chosen, list) or not chosen or any(x not in names for x in chosen):
        raise ConfigError(f"{where}: at must be a level ({', '.join(names)}), a list of them "
                          f"or {ALL!r}, got {at!r}")
    return list(chosen)


def level_clashes(conditions: dict, overrides: dict) -> list[str]:
    """The dotted keys an arm's overrides set that some level also sets."""
    mine = set(flatten(overrides))
    theirs = {k for lv in (conditions.get("levels") or {}).values()
              for k in flatten(lv["overrides"])}
    return sorted(k for k in mine if any(k == t or k.startswith(t + ".") or
                                         t.startswith(k + ".") for t in theirs))


def level_keys(conditions: dict) -> list[str]:
    """Every dotted key some level sets: what arms at different levels differ in."""
    return sorted({k for lv in (conditions.get("levels") or {}).values()
                   for k in flatten(lv["overrides"])})
