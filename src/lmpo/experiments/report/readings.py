"""What a claim reads from its runs: each arm's finished runs, their per-seed values
(a reduction of a metric, or its reading at a matched drift level), and the claims with
their bounds set by the one bound rule (`lmpo.experiments.report.bounds`)."""

from __future__ import annotations

import math

from lmpo.experiments.report.bounds import apply_rule
from lmpo.experiments.stats.seeds import reduce_metric


def finished_rows(data: dict, arm: str) -> dict[int, list[dict]]:
    return {seed: data["runs"][(arm, seed)]["rows"] for seed in data["experiment"].seeds
            if data["runs"][(arm, seed)]["finished"]}


def seed_values(data: dict, arm: str, metric: str, reduce: str, k: int = 20) -> dict[int, float]:
    """{seed: value} over the arm's finished runs that logged `metric` ("gain" reads the
    run's evaluation before training as its first row)."""
    out = {}
    for seed, rows in finished_rows(data, arm).items():
        if reduce == "gain":
            rows = [data["runs"][(arm, seed)]["before_row"], *rows]
        try:
            out[seed] = reduce_metric(rows, metric, reduce, k)
        except KeyError:
            pass
    return out


def matched_values(data: dict, claim: dict) -> tuple[dict, dict]:
    """({arm: {seed: the metric where the run's drift first reaches the level}}, {arm:
    [the finished seeds whose run never reaches it]}): a matched claim's values."""
    from lmpo.experiments.design.frontier import curve, read_at

    m = claim["matched"]
    per_arm, unreached = {}, {}
    for arm in claim["arms"]:
        per_arm[arm] = {}
        for seed in finished_rows(data, arm):
            run = data["runs"][(arm, seed)]
            value = read_at(curve(run["rows"], run["before_row"], m["x"], claim["metric"],
                                  int(m.get("window", 10))), float(m["level"]))
            if math.isnan(value):
                unreached.setdefault(arm, []).append(seed)
            else:
                per_arm[arm][seed] = value
    return per_arm, unreached


def claims_under_rule(data: dict, flats: dict) -> list[dict]:
    """The experiment's claims with their bounds set by the one bound rule
    (`lmpo.experiments.report.bounds`)."""
    def read(claim: dict, arm: str) -> dict[int, float]:
        if "matched" in claim:
            return matched_values(data, claim | {"arms": [arm]})[0][arm]
        return seed_values(data, arm, claim["metric"], claim.get("reduce", "final"),
                           int(claim.get("k", 20)))

    return [apply_rule(c, data, flats, read) for c in data["experiment"].claims]
