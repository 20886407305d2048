"""Experiment files: arms x seeds of `lmpo train` runs that differ only where declared.

    # one-line description
    extends: other.yaml                      # optional: a file this one changes (merged)
    base: {rollout: {group_size: 2}}        # config keys over every arm's preset
    arms:
      grpo: {preset: grpo}
      grpo_or: {preset: grpo_or, overrides: {loss: {hparams: {alpha: 0.2}}}}
    seeds: 5                                 # or a list [0, 1, 2, 3, 4] (default 5), or
                                             # {first: 40, start: 5, max: 15, step: 5}:
                                             # seeds until the headline claims are decided
                                             # (lmpo.experiments.design.sequential)
    steps: 600
    differs_in: [loss]                       # dotted keys (a prefix covers what is under it)
    claims: [...]                            # see lmpo.experiments.stats.seeds
    notes: ["..."]                           # optional: what changed after runs, and why
    frontier: {x: kl/ref, ys: [...]}         # optional: arms read at matched drift
                                             # (lmpo.experiments.design.frontier)
    conditions: {axis: staleness, levels: {L0: {dose: 0}, L1: {dose: 4, rollout: {...}}}}
                                             # optional: a condition axis applied to every
                                             # arm (lmpo.experiments.design.conditions); an arm's
                                             # `levels: [L0, L1]` runs it at those alone
    engaged_floor: 0.01                      # optional: the shadow distance below which a pair's
                                             # treatment did not engage (DEFAULT_FLOOR)

Each arm's config resolves as defaults <- arm preset <- base <- arm overrides <- the
command line (`--steps`, `--seeds`); mappings merge as in `extends:`. Before any run,
`check_differs` fails on any resolved key the arms differ in outside `differs_in`.
`notes` (and the description and `differs_in`) may change between invocations of a
sweep; the arms, seeds, steps and claims may not (RUN_KEYS): the claims are fixed when
the first run starts, and a note says in the report what was changed after that.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from lmpo import presets
from lmpo.config import merge, read_yaml
from lmpo.errors import ConfigError
from lmpo.experiments.design.arm_checks import check_arms_against
from lmpo.experiments.design.claims import claim_role
from lmpo.experiments.design.conditions import (
    ONCE,
    check_conditions,
    claim_levels,
    level_keys,
    level_names,
    name_at,
    run_arm,
)
from lmpo.experiments.design.derived import at_strength, split_claims
from lmpo.experiments.design.frontier import check_frontier
from lmpo.experiments.design.names import check_name
from lmpo.experiments.design.power import parse_power
from lmpo.experiments.stats.kinds import claim_kind

DEFAULT_SEEDS = 5  # reproductions need >= 5: 3 seeds resolve only large effects
# a resumed sweep keeps these
RUN_KEYS = ("name", "base", "arms", "seeds", "steps", "claims", "frontier", "conditions",
            "premises", "twins", "warm_starts")
WARM_STARTS = ("per_seed", "shared")  # a warm-start preset drawn per seed, or one for all


@dataclass
class Arm:
    name: str
    preset: str
    overrides: dict = field(default_factory=dict)
    levels: list[str] | str | None = None  # the levels it runs at (None: all; "once")
    seed_offset: int = 0  # its run k trains with seed k + seed_offset (a premise's own seeds)


@dataclass
class Experiment:
    name: str
    description: str
    base: dict
    arms: list[Arm]
    seeds: list[int]
    steps: int
    differs_in: list[str]
    claims: list[dict]
    notes: list[str] = field(default_factory=list)
    effective_tolerance: dict = field(default_factory=dict)  # {ratio: 1.5, share: 0.2}
    frontier: dict = field(default_factory=dict)  # lmpo.experiments.design.frontier
    conditions: dict = field(default_factory=dict)  # lmpo.experiments.design.conditions
    engaged_floor: float | None = None  # None: lmpo.experiments.report.engagement.DEFAULT_FLOOR
    flat: bool = False  # arms are the runs' `arm@level` (see `expand`)
    # seeds until decided: {first, start, max, step}; `seeds` then holds the looks taken
    design: dict | None = None
    # what must hold for the claims to be tested here (lmpo.experiments.design.premises)
    premises: list[dict] = field(default_factory=list)
    # each arm's runs also log their methods' ablated twins (`twin_<method>` comparators),
    # and a claim whose first arm's twin distance is below the floor reads "mechanism inert"
    twins: bool = False
    # per_seed: each run starts from its own seed's SFT draw of a warm-start preset
    # (`policy_seed`); shared: every run from the preset's one (sweeps made before the key)
    warm_starts: str = "per_seed"
    # the source of variance the power plan reads (lmpo.experiments.design.power)
    power: dict | None = None

    def arm(self, name: str) -> Arm:
        for a in self.arms:
            if a.name == name:
                return a
        raise ConfigError(f"unknown arm {name!r}; arms: {', '.join(a.name for a in self.arms)}")

    def to_dict(self) -> dict:
        return {"name": self.name, "description": self.description, "base": self.base,
                "arms": {a.name: {"preset": a.preset, "overrides": a.overrides}
                         | ({"levels": a.levels} if a.levels is not None else {})
                         | ({"seed_offset": a.seed_offset} if a.seed_offset else {})
                         for a in self.arms},
                "seeds": self.design or self.seeds, "steps": self.steps,
                "differs_in": self.differs_in,
                "claims": self.claims} | ({"notes": self.notes} if self.notes else {}) \
            | ({"effective_tolerance": self.effective_tolerance}
               if self.effective_tolerance else {}) \
            | ({"frontier": self.frontier} if self.frontier else {}) \
            | ({"conditions": {"axis": self.conditions["axis"], "levels": {
                name: {"dose": lv["dose"]} | lv["overrides"]
                for name, lv in self.conditions["levels"].items()}}}
               if self.conditions else {}) \
            | ({"engaged_floor": self.engaged_floor} if self.engaged_floor is not None else {}) \
            | ({"premises": self.premises} if self.premises else {}) \
            | ({"twins": True} if self.twins else {}) | {"warm_starts": self.warm_starts} \
            | ({"power": self.power} if self.power else {})

    @property
    def once(self) -> set[str]:
        """The arms that run once, outside the condition axis (`levels: once`)."""
        return {a.name for a in self.arms if a.levels == ONCE}

    def arm_levels(self, name: str) -> list[str | None]:
        """The levels an arm runs at, or stands at ([None] without conditions)."""
        levels = self.arm(name).levels
        return levels if isinstance(levels, list) else level_names(self.conditions) or [None]

    def shared_levels(self, arms: list[str]) -> list[str | None]:
        """The levels every one of `arms` runs at, in the experiment's order."""
        return [lv for lv in level_names(self.conditions) or [None]
                if all(lv in self.arm_levels(a) for a in arms)]

    def claim_levels(self, claim: dict, where: str) -> list[str | None]:
        """The levels a claim is judged at: its `at` (default: every level its arms share);
        a ConfigError where `at` names a level one of its arms does not run at."""
        shared = self.shared_levels(claim_arms(claim))
        if claim_kind(claim["kind"]).over_levels:
            if len(shared) < 2:
                raise ConfigError(f"{where}: a dose_response claim's arms must share >= 2 "
                                  f"levels; they share {shared}")
            return shared
        chosen = claim_levels(claim, self.conditions, where)
        if "at" not in claim:
            chosen = [lv for lv in chosen if lv in shared]
        missing = [lv for lv in chosen if lv not in shared]
        if missing or not chosen:
            raise ConfigError(f"{where}: its arms {claim_arms(claim)} do not all run at "
                              f"{missing or 'any shared level'} (arms' `levels`)")
        return chosen

    def expand(self) -> Experiment:
        """The experiment as its runs see it: arms x levels as arms `arm@level` (the level's
        overrides over the arm's), and claims one per level they are judged at (each with
        `level` and `role`: headline at L0, or everywhere without conditions; descriptive at
        other levels and wherever the claim says `descriptive: true`; secondary where the
        experiment declares primary claims and this is not one); a dose_response claim
        keeps its arms and gains `by_level`."""
        if self.flat:
            return self
        names, once = level_names(self.conditions) or [None], self.once
        arms = [Arm(run_arm(a.name, lv), a.preset, merge(
            a.overrides, self.conditions["levels"][lv]["overrides"]) if lv else a.overrides,
            seed_offset=a.seed_offset)
            for lv in names for a in self.arms
            if a.name not in once and lv in self.arm_levels(a.name)]
        arms += [Arm(a.name, a.preset, a.overrides, seed_offset=a.seed_offset)
                 for a in self.arms if a.name in once]
        primaries = any(c.get("primary") for c in self.claims)
        claims = []
        for i, claim in enumerate(self.claims):
            shared = self.shared_levels(claim_arms(claim))
            if claim_kind(claim["kind"]).over_levels:
                claims.append(claim | {"index": i, "level": None, "role": claim_role(
                    claim, primaries), "by_level": {
                    lv: [name_at(a, lv, once) for a in claim["arms"]] for lv in shared}})
                continue
            for lv in self.claim_levels(claim, f"claims[{i}]"):
                role = claim_role(claim, primaries, lv in (None, names[0]))
                extra = {"comparator": name_at(claim["comparator"], lv, once)} \
                    if "comparator" in claim else {}
                own = claim | extra | {
                    "arms": [name_at(a, lv, once) for a in claim["arms"]], "index": i, "level": lv,
                    "role": role, "base_arms": claim["arms"]}
                claims += at_strength(own) + split_claims(
                    claim, i, lv, [a.name for a in self.arms if lv in self.arm_levels(a.name)],
                    once)
        for i, premise in enumerate(self.premises):  # judged per level, after the claims
            versus = premise.get("versus")
            alone = set(premise["arms"]) <= once  # judged once, gating every level
            for lv in [None] if alone else self.claim_levels(premise, f"premises[{i}]"):
                if versus is not None and lv == versus:
                    continue  # an arm against itself at `versus`: the other levels
                reads = [name_at(a, lv, once) for a in premise["arms"]] + (
                    [run_arm(premise["arms"][0], versus)] if versus is not None else [])
                named = premise["arms"] + ([f"{premise['arms'][0]}@{versus}"]
                                           if versus is not None else [])
                claims.append(premise | {
                    "arms": reads, "level": lv, "role": "premise", "index": i,
                    "premise_index": i, "base_arms": named})
        return replace(self, arms=arms, claims=claims, flat=True,
                       differs_in=self.differs_in + level_keys(self.conditions))


def claim_arms(claim: dict) -> list[str]:
    """The arms a claim is judged on at a level: its own and its comparator (its twin and
    anchor-matched arm split it where they run: lmpo.experiments.design.derived)."""
    return [*claim["arms"], *([claim["comparator"]] if "comparator" in claim else [])]


def _seeds(value, where: str) -> list[int]:
    if isinstance(value, dict):
        from lmpo.experiments.design.sequential import all_seeds, check_design

        design = check_design(value, where)
        return all_seeds(design)[:design["start"]]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return list(range(value))
    if isinstance(value, list) and value and all(isinstance(s, int) for s in value):
        if len(set(value)) != len(value):
            raise ConfigError(f"{where}: seeds repeat: {value}")
        return list(value)
    raise ConfigError(f"{where}: seeds must be a count >= 1 or a list of ints, got {value!r}")


EXPERIMENT_KEYS = {"name", "description", "notes", "base", "arms", "seeds", "steps",
                   "differs_in", "claims", "effective_tolerance", "frontier", "conditions",
                   "engaged_floor", "premises", "twins", "warm_starts", "power"}


def parse_experiment(data: dict, name: str, where: str) -> Experiment:
    """An experiment file's contents, checked (one ConfigError naming the key, before any
    run): its keys, arms, settings, conditions, claims and premises."""
    unknown = sorted(set(data) - EXPERIMENT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown experiment key(s) {unknown}; valid: "
                          f"{', '.join(sorted(EXPERIMENT_KEYS))}")
    check_name(data.get("name", name), "the experiment", where)
    arms = parse_arms(data.get("arms"), where)
    settings = parse_settings(data, where)
    design = None
    if isinstance(data.get("seeds"), dict):  # scipy is imported only for this
        from lmpo.experiments.design.sequential import sequential_design

        design = sequential_design(data["seeds"], settings["claims"], where,
                                   data.get("conditions"))
    exp = Experiment(name=str(data.get("name", name)), description=str(data.get("description", "")),
                     base=dict(data.get("base") or {}), arms=arms,
                     seeds=_seeds(data.get("seeds", DEFAULT_SEEDS), where), design=design,
                     frontier=check_frontier(data.get("frontier"), where),
                     conditions=check_conditions(data.get("conditions"), where),
                     engaged_floor=data.get("engaged_floor"),
                     twins=parse_twins(data.get("twins", False), where),
                     warm_starts=parse_warm_starts(data.get("warm_starts", "per_seed"), where),
                     power=parse_power(data.get("power"), where),
                     **settings)
    check_arms_against(exp, where)
    check_claims_and_premises(exp, data.get("premises"), where)
    return exp


def parse_twins(value, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: twins must be true or false, got {value!r}")
    return value


def parse_warm_starts(value, where: str) -> str:
    if value not in WARM_STARTS:
        raise ConfigError(f"{where}: warm_starts must be one of {', '.join(WARM_STARTS)}, got "
                          f"{value!r}")
    return value


def parse_arms(arms_raw, where: str) -> list[Arm]:
    """`arms: {name: {preset, overrides, levels, seed_offset}}`."""
    if not isinstance(arms_raw, dict) or len(arms_raw) < 1:
        raise ConfigError(f"{where}: arms must map arm names to {{preset, overrides}}")
    arms = []
    for arm_name, spec in arms_raw.items():
        check_name(arm_name, "an arm", where)
        if not isinstance(spec, dict) or "preset" not in spec or \
                set(spec) - {"preset", "overrides", "levels", "seed_offset"}:
            raise ConfigError(f"{where}: arm {arm_name!r} must be {{preset: NAME, overrides: "
                              f"{{...}}, levels: [...], seed_offset: N (both optional)}}, got "
                              f"{spec!r}")
        offset = spec.get("seed_offset", 0)
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"{where}: arm {arm_name!r}: seed_offset must be an int >= 0, "
                              f"got {offset!r}")
        arms.append(Arm(str(arm_name), str(spec["preset"]), dict(spec.get("overrides") or {}),
                        [str(lv) for lv in spec["levels"]]
                        if isinstance(spec.get("levels"), list) else spec.get("levels"),
                        seed_offset=offset))
    return arms


def parse_settings(data: dict, where: str) -> dict:
    """steps, differs_in, claims (as mappings; each checked once the arms are known),
    notes and effective_tolerance, as `Experiment` fields."""
    steps = data.get("steps")
    if not isinstance(steps, int) or steps < 1:
        raise ConfigError(f"{where}: steps must be an int >= 1, got {steps!r}")
    differs = data.get("differs_in")
    if not isinstance(differs, list) or not all(isinstance(k, str) for k in differs):
        raise ConfigError(f"{where}: differs_in must be a list of dotted config keys")
    claims = data.get("claims") or []
    if not isinstance(claims, list) or not all(isinstance(c, dict) for c in claims):
        raise ConfigError(f"{where}: claims must be a list of mappings ({{kind, metric, arms, "
                          "...}}), one per claim")
    notes = data.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ConfigError(f"{where}: notes must be a list of strings")
    tolerance = data.get("effective_tolerance") or {}
    if not isinstance(tolerance, dict) or set(tolerance) - {"ratio", "share"} or not all(
            isinstance(v, int | float) and v > 0 for v in tolerance.values()):
        raise ConfigError(f"{where}: effective_tolerance is {{ratio: > 1, share: > 0}}, got "
                          f"{tolerance!r}")
    return {"steps": steps, "differs_in": list(differs), "claims": [dict(c) for c in claims],
            "notes": list(notes), "effective_tolerance": dict(tolerance)}


def check_claims_and_premises(exp: Experiment, premises, where: str) -> None:
    """Each claim against the arms and levels; the premises (kept on `exp`), which read no
    metric of an arm a claim they gate reads."""
    from lmpo.experiments.design.claims import check_claim
    from lmpo.experiments.design.premises import check_premise_reads, check_premises

    names = [a.name for a in exp.arms]
    for i, claim in enumerate(exp.claims):
        check_claim(claim, names, f"{where}: claims[{i}]", exp.conditions)
        if exp.conditions:
            exp.claim_levels(claim, f"{where}: claims[{i}]")
    exp.premises = check_premises(premises, names, len(exp.claims), where, exp.conditions)
    check_premise_reads(exp.premises, exp.claims, where)
    for i, premise in enumerate(exp.premises):
        if exp.conditions:
            exp.claim_levels(premise, f"{where}: premises[{i}]")


def load_experiment(spec: str | Path) -> Experiment:
    """An experiment by preset name (`lmpo presets`) or file path."""
    path = presets.resolve(spec, "experiment")
    data = read_yaml(path, "experiment")  # `extends: other.yaml` merged in, as for configs
    exp = parse_experiment(data, path.stem, str(path))
    for arm in exp.arms:  # an arm's preset file is relative to the experiment file
        if presets.looks_like_file(arm.preset) and not Path(arm.preset).is_absolute():
            arm.preset = str((path.parent / arm.preset).resolve())
    if not exp.description:
        exp.description = presets.title(path)
    return exp


# each run's config, built from the experiment (kept importable from here)
from lmpo.experiments.design.runs import (  # noqa: E402
    arm_config,
    arm_data,
    arm_differences,
    check_differs,
    dropped_base_hparams,
)

__all__ = ["Arm", "Experiment", "arm_config", "arm_data", "arm_differences",
           "check_differs", "dropped_base_hparams", "load_experiment", "parse_experiment"]
