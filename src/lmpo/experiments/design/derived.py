"""Claims derived from a declared one when the experiment is expanded:

- **Decomposition** (`twin: ARM`): the claim "method > baseline" split in two descriptive
  rows beside it, the mechanism's part (method - twin) and the shared part (twin -
  baseline), each with its own interval (`split_claims`).
- **The paper's strength** (`strength: {multiple: 10, fraction: 0.5}`): where the paper
  states a multiple ("group methods displace ~10-25x more"), the headline is the ratio
  claim at a declared fraction of the paper's multiple (here >= 5x: a threshold claim on
  the per-seed ratio), and the direction claim stays beside it, descriptive
  (`at_strength`). With `reanalysis: true` (the ratio written after the runs, judged on
  their committed rows) the ratio claim's label says "re-analysis", and the direction
  claim keeps its place in the sequential design that decided the runs' seeds
  (`role_at_run`).
"""

from __future__ import annotations

from lmpo.errors import ConfigError
from lmpo.experiments.design.conditions import name_at
from lmpo.experiments.stats.kinds.direction import Direction
from lmpo.experiments.stats.kinds.threshold import Threshold

STRENGTH_KEYS = {"multiple", "fraction"}


def check_strength(claim: dict, where: str) -> None:
    """A ConfigError for a malformed `strength:` or `reanalysis:`."""
    if "reanalysis" in claim and not isinstance(claim["reanalysis"], bool):
        raise ConfigError(f"{where}: reanalysis must be true or false")
    if "strength" not in claim:
        return
    s = claim["strength"]
    ok = isinstance(s, dict) and set(s) == STRENGTH_KEYS and all(
        isinstance(s[k], int | float) and not isinstance(s[k], bool) for k in s)
    if not ok or not s["multiple"] > 1 or not 0 < s["fraction"] <= 1:
        raise ConfigError(f"{where}: strength is {{multiple: M, fraction: f}} (the paper's "
                          f"multiple M > 1, its low end; the claim tests >= f*M, 0 < f <= 1), "
                          f"got {s!r}")
    if claim.get("kind") != Direction.name or len(claim.get("arms", [])) != 2 or \
            claim.get("expect") not in ("greater", "less"):
        raise ConfigError(f"{where}: strength applies to a two-arm direction claim (the ratio "
                          "of its arms is then tested at the paper's strength)")


def at_strength(claim: dict) -> list[dict]:
    """The expanded claim, or (with `strength`) the ratio claim at the declared fraction of
    the paper's multiple in its role, then the direction claim, descriptive."""
    if "strength" not in claim:
        return [claim]
    s, (a, b) = claim["strength"], claim["arms"]
    bound = float(s["multiple"]) * float(s["fraction"])
    big, small = (a, b) if claim["expect"] == "greater" else (b, a)
    base = claim["base_arms"]
    names = (base[0], base[1]) if claim["expect"] == "greater" else (base[1], base[0])
    ratio = {k: v for k, v in claim.items() if k not in (
        "strength", "min_effect", "expect", "twin", "descriptive")} | {
        "kind": Threshold.name, "statistic": "ratio", "expect": "above", "bound": bound,
        "arms": [small, big], "base_arms": [names[1], names[0]],
        "sentence": f"{claim['sentence'].strip()}: at least {bound:g}x ({s['fraction']:g} of "
                    f"the paper's {s['multiple']:g}x)"}
    direction = {k: v for k, v in claim.items() if k not in ("strength", "reanalysis",
                                                             "primary")} | {
        "role": "descriptive", "descriptive": True}
    if claim.get("reanalysis"):
        direction["role_at_run"] = claim["role"]
    return [ratio, direction]


def split_claims(claim: dict, index: int, level: str | None,
                 running: list[str] | None = None, once=frozenset()) -> list[dict]:
    """A claim that names its first arm's `twin` (the method with only its mechanism
    removed), split in two descriptive rows beside it: the mechanism's part (method - twin)
    and the shared part (twin - baseline), each with its own interval. One that names an
    `anchor` (the first arm with the baseline's anchor, `rollout.old_logp`), likewise: the
    anchor's part (method - anchor-matched method) and the matched part (anchor-matched
    method - baseline). Each split where its arm runs at `level` (`running`: the arms that
    do; None: all; `once`: the arms that run once, outside the levels)."""
    if "twin" not in claim and "anchor" not in claim:
        return []
    (m, b) = claim["arms"][:2]
    parts = []
    if "twin" in claim and (running is None or claim["twin"] in running):
        t = claim["twin"]
        parts += [("mechanism", (m, t)), ("shared", (t, b))]
    if "anchor" in claim and (running is None or claim["anchor"] in running):
        r = claim["anchor"]
        parts += [("anchor", (m, r)), ("matched", (r, b))]
    base = {k: v for k, v in claim.items() if k not in (
        "twin", "anchor", "comparator", "primary", "strength", "reanalysis")}
    return [base | {"arms": [name_at(x, level, once), name_at(y, level, once)], "index": index,
                    "level": level, "role": "descriptive", "descriptive": True,
                    "base_arms": [x, y], "split": part,
                    "sentence": f"{claim['sentence'].strip()} ({part} part: {x} - {y})"}
            for part, (x, y) in parts]
