"""Each arm of an experiment against the rest of its design: the engagement floor, the
frontier's pairs, and the condition levels (no key a level sets, levels that exist, or
`levels: once`)."""

from __future__ import annotations

from lmpo.errors import ConfigError
from lmpo.experiments.design.conditions import ONCE, level_clashes, level_names


def check_arms_against(exp, where: str) -> None:
    """The engagement floor, the frontier's pairs, and each arm against the conditions:
    no key a level sets, levels that exist."""
    floor = exp.engaged_floor
    if floor is not None and (isinstance(floor, bool) or not isinstance(floor, int | float)
                              or not 0 < floor < 1):
        raise ConfigError(f"{where}: engaged_floor must be a number in (0, 1), got {floor!r}")
    arms = exp.arms
    unknown = sorted({a for pair in exp.frontier.get("pairs", []) for a in pair}
                     - {a.name for a in arms})
    if unknown:
        raise ConfigError(f"{where}: frontier.pairs name arms that are not in the experiment: "
                          f"{', '.join(unknown)} (arms: {', '.join(a.name for a in arms)})")
    for arm in arms:
        clash = [] if arm.levels == ONCE else level_clashes(exp.conditions, arm.overrides)
        if clash:
            raise ConfigError(f"{where}: arm {arm.name!r} sets {', '.join(clash)}, which the "
                              "condition levels set for every arm")
        names = level_names(exp.conditions)
        if arm.levels == ONCE and names:
            continue
        if arm.levels is not None and not (
                names and isinstance(arm.levels, list) and arm.levels
                and len(set(arm.levels)) == len(arm.levels)
                and all(lv in names for lv in arm.levels)):
            raise ConfigError(f"{where}: arm {arm.name!r}: levels must list distinct levels "
                              f"of the experiment's conditions ({', '.join(names) or 'none'}) "
                              f"or be {ONCE!r} (with conditions), got {arm.levels!r}")
