"""Arms read at matched drift: each evaluated metric interpolated at levels of a drift
metric (the KL to the reference) that every run reaches, and where each metric peaks.

    frontier:
      x: kl/ref                                   # a per-step training metric
      ys: [eval/reward_mean, eval/accuracy/t3d1]  # evaluated metrics (log.eval_every)
      levels: 4                                   # x levels, evenly spaced up to the reach
      window: 10                                  # x at an evaluation: its mean over the
                                                  # last `window` logged steps
      peak: [eval/accuracy/t3d1]                  # where each of these peaks (optional)
      pairs: [[ppo_or, ppo_clip]]                 # paired differences (optional)

A policy optimised against a learned reward model moves away from its reference as it
gains reward, and faster under some losses than others; "final reward-model score" then
partly measures how far each arm moved. Reading every arm at the same KL (the score-vs-KL
frontier, as in reward-model over-optimisation studies) separates the two. Each run's
curve is its evaluations, x being the training KL around that step, starting at (0, the
score before training); the curve is read at level L where it first reaches L (linear
interpolation between the two evaluations around the crossing). The reach is the
smallest largest-x over all runs, so every run has a value at every level.

`pairs` adds, for each [a, b] (at each condition level), a - b per seed at each level:
its mean and 95% interval over the seeds both arms finished, as a claim's (a paired t
interval below 10 seeds). Descriptive: the intervals are not adjusted for the levels,
metrics and pairs read.
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.errors import ConfigError
from lmpo.experiments.design.conditions import run_arm, split_arm
from lmpo.experiments.stats.seeds import mean_interval, summarize

KEYS = {"x", "ys", "levels", "window", "peak", "pairs"}


def check_frontier(spec, where: str) -> dict:
    """The frontier block with defaults, or ConfigError."""
    if not spec:
        return {}
    if not isinstance(spec, dict) or set(spec) - KEYS or not {"x", "ys"} <= set(spec):
        raise ConfigError(f"{where}: frontier is {{x, ys, levels, window, peak, pairs}} (x "
                          f"and ys required), got {spec!r}")
    # pairs has no default, so that an experiment without it saves (and resumes) as before
    out = {"levels": 4, "window": 10, "peak": []} | dict(spec)
    pairs = out.get("pairs", [])
    if not isinstance(pairs, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(a, str) for a in p)
            and p[0] != p[1] for p in pairs):
        raise ConfigError(f"{where}: frontier.pairs must be a list of [arm, other arm], got "
                          f"{pairs!r}")
    for key in ("ys", "peak"):
        if not isinstance(out[key], list) or not all(isinstance(m, str) for m in out[key]):
            raise ConfigError(f"{where}: frontier.{key} must be a list of metric names")
    for key in ("levels", "window"):
        if not isinstance(out[key], int) or isinstance(out[key], bool) or out[key] < 1:
            raise ConfigError(f"{where}: frontier.{key} must be an int >= 1")
    return out


def curve(rows: list[dict], before: dict, x: str, y: str, window: int) -> list[tuple]:
    """[(step, x, y)] at each evaluation of y, from (0, 0, y before training)."""
    points = [(0, 0.0, before[y])] if y in before else []
    xs: list[float] = []
    for r in rows:
        if r.get(x) is not None:
            xs.append(float(r[x]))
        if r.get(y) is not None and xs and r["step"] > 0:
            points.append((r["step"], float(np.mean(xs[-window:])), float(r[y])))
    return points


def read_at(points: list[tuple], level: float) -> float:
    """y where the curve first reaches x >= level (NaN if it never does)."""
    if points and points[0][1] >= level:
        return points[0][2]
    for (_, x0, y0), (_, x1, y1) in zip(points, points[1:], strict=False):
        if x1 >= level:
            if x1 == x0:
                return y1
            return y0 + (y1 - y0) * (level - x0) / (x1 - x0)
    return math.nan


def frontier_table(data: dict, spec: dict) -> dict:
    """{"levels", "reach", "at": {y: {arm: [summary per level]}}, "pairs": {y: {"a - b":
    [difference per level]}}, "peak": {y: {arm: {value, step, x}}}}, each over the arm's
    finished seeds."""
    exp = data["experiment"]
    runs = {key: run for key, run in data["runs"].items() if run["finished"]}
    curves = {(key, y): curve(run["rows"], run["before_row"], spec["x"], y, spec["window"])
              for key, run in runs.items() for y in spec["ys"] + spec["peak"]}
    tops = [max(x for _, x, _ in c) for c in curves.values() if c]
    if not tops:
        return {}
    reach = min(tops)
    levels = [reach * (i + 1) / spec["levels"] for i in range(spec["levels"])]
    out = {"x": spec["x"], "levels": levels, "reach": reach, "at": {}, "pairs": {}, "peak": {}}
    for y in spec["ys"]:
        per_seed = {arm.name: {k[1]: [read_at(curves[(k, y)], lv) for lv in levels]
                               for k in runs if k[0] == arm.name} for arm in exp.arms}
        out["at"][y] = {arm: [summarize([v[i] for v in seeds.values()])
                              for i in range(len(levels))] for arm, seeds in per_seed.items()}
        if spec.get("pairs"):
            out["pairs"][y] = pair_differences(per_seed, spec["pairs"], len(levels))
    for y in spec["peak"]:
        out["peak"][y] = {}
        for arm in exp.arms:
            best = [max(curves[(k, y)], key=lambda p: p[2]) for k in runs
                    if k[0] == arm.name and curves[(k, y)]]
            if best:
                out["peak"][y][arm.name] = {
                    "value": summarize([b[2] for b in best]),
                    "step": summarize([b[0] for b in best]),
                    "x": summarize([b[1] for b in best])}
    return out


def pair_differences(per_seed: dict, pairs: list[list[str]], levels: int) -> dict:
    """{"a@L - b@L": [{"mean", "ci", "n"} per level]} for each pair at each condition level,
    from per_seed {run arm: {seed: [value per level]}} over the seeds both arms have."""
    out = {}
    for name in per_seed:
        arm, level = split_arm(name)
        for a, b in pairs:
            other = run_arm(b, level)
            if arm != a or other not in per_seed:
                continue
            seeds = sorted(set(per_seed[name]) & set(per_seed[other]))
            rows = []
            for i in range(levels):
                d = np.array([per_seed[name][s][i] - per_seed[other][s][i] for s in seeds])
                d = d[np.isfinite(d)]
                mean, lo, hi = (float(d.mean()) if d.size else math.nan), math.nan, math.nan
                if d.size > 1:  # the claims' interval on the per-seed differences
                    mean, lo, hi, _ = mean_interval(d)
                rows.append({"mean": mean, "ci": [lo, hi], "n": int(d.size)})
            out[f"{name} - {other}"] = rows
    return out


def frontier_lines(front: dict, arms: list[str], fmt, cell) -> list[str]:
    """The report's section (empty without a frontier)."""
    if not front:
        return []
    lines = ["", f"### At matched {front['x']}", "",
             f"Each run's evaluations read where its {front['x']} (training mean over the "
             f"steps before the evaluation) first reaches the level; levels up to "
             f"{fmt(front['reach'])}, the largest that every run reaches.", ""]
    for y, per_arm in front["at"].items():
        lines += [f"**{y}**", "", f"| {front['x']} | " + " | ".join(arms) + " |",
                  "|---|" + "---|" * len(arms)]
        for i, level in enumerate(front["levels"]):
            lines.append(f"| {fmt(level)} | " + " | ".join(
                cell(per_arm[a][i]) if a in per_arm else "-" for a in arms) + " |")
        lines.append("")
        diffs = front.get("pairs", {}).get(y)
        if diffs:
            lines += [f"*{y}, paired by seed* (mean [95% paired interval, as a claim's]; "
                      "descriptive, unadjusted)",
                      "", f"| {front['x']} | " + " | ".join(diffs) + " |",
                      "|---|" + "---|" * len(diffs)]
            for i, level in enumerate(front["levels"]):
                lines.append(f"| {fmt(level)} | " + " | ".join(
                    f"{fmt(d[i]['mean'])} [{fmt(d[i]['ci'][0])}, {fmt(d[i]['ci'][1])}]"
                    for d in diffs.values()) + " |")
            lines.append("")
    for y, per_arm in front["peak"].items():
        lines += [f"**Where {y} peaks** (its largest evaluated value per run)", "",
                  f"| arm | peak value | at step | at {front['x']} |", "|---|---|---|---|"]
        lines += [f"| {a} | {cell(p['value'])} | {cell(p['step'])} | {cell(p['x'])} |"
                  for a, p in per_arm.items()]
        lines.append("")
    return lines
