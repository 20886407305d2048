"""Variance components of an accuracy claim: simulated runs with a known training-seed
component and known per-problem success probabilities give back both components within
Monte Carlo error; the records rebuild the metric's tier-macro weights; the current
allocation's MDE is the claim's own; a claim card prints the split."""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.report.claim_table import card
from lmpo.experiments.report.components import (
    allocations,
    components,
    split,
    variance_text,
    weights,
)
from lmpo.experiments.stats.labels import judge
from lmpo.experiments.stats.seeds import LEVEL

P, K, TIERS = 60, 8, ("t1", "t2")


def records(probs: np.ndarray, rng: np.random.Generator) -> dict:
    draws = rng.random((len(probs), K)) < probs[:, None]
    return {"samples": K, "problems": [f"p{i}" for i in range(len(probs))],
            "tiers": [TIERS[i % 2] for i in range(len(probs))],
            "correct": ["".join("1" if x else "0" for x in row) for row in draws]}


def simulate(seeds: int, tau: float, rng: np.random.Generator):
    base = rng.uniform(0.2, 0.8, P)
    pairs, within = [], []
    w = np.full(P, 1 / P)
    for _ in range(seeds):
        pa = base + 0.03 + rng.normal(0, tau)
        pairs.append((records(pa, rng), records(base, rng)))
        within.append((w ** 2) @ (pa * (1 - pa) + base * (1 - base)) / K)
    return pairs, float(np.mean(within))


def test_simulated_components_are_recovered_within_monte_carlo_error():
    rng = np.random.default_rng(60)
    tau, seeds = 0.03, 400
    pairs, true_sampling = simulate(seeds, tau, rng)
    w = weights(pairs[0][0], "eval/accuracy_mean", None)
    comp = split(pairs, w)
    total = tau ** 2 + true_sampling
    se_var = total * math.sqrt(2 / (seeds - 1))  # the sample variance's standard error
    assert abs(comp["seed"] - tau ** 2) < 4 * se_var
    assert abs(comp["sampling"] - true_sampling) < 0.05 * true_sampling
    assert comp["n"] == seeds and comp["samples"] == K and comp["problems"] == P
    # no seed component: all of the variance is sampling
    flat = split(simulate(seeds, 0.0, np.random.default_rng(61))[0], w)
    assert flat["seed"] < 4 * true_sampling * math.sqrt(2 / (seeds - 1))


def test_the_weights_rebuild_the_tier_macro_metric():
    rec = {"samples": 2, "problems": ["a", "b", "c"], "tiers": ["t1", "t1", "t2"],
           "correct": ["11", "01", "00"]}
    assert np.allclose(weights(rec, "eval/accuracy_mean", None), [0.25, 0.25, 0.5])
    assert np.allclose(weights(rec, "eval/accuracy_trained", ["t1"]), [0.5, 0.5, 0])
    assert np.allclose(weights(rec, "eval/accuracy_other", ["t1"]), [0, 0, 1])
    assert np.allclose(weights(rec, "eval/accuracy/t2", None), [0, 0, 1])
    assert weights(rec, "eval/reward_mean", None) is None
    # accuracy_mean = mean over tiers of the tier's mean: (0.75 + 0) / 2
    w = weights(rec, "eval/accuracy_mean", None)
    assert w @ np.array([1.0, 0.5, 0.0]) == 0.375


def claim_data(pairs, train_s=100.0, eval_s=2.0):
    claim = {"kind": "direction", "metric": "eval/accuracy_mean", "arms": ["a", "b"],
             "expect": "greater", "min_effect": 0.04, "reduce": "final",
             "seeds": list(range(len(pairs))), "n": len(pairs)}
    rows = [{"step": 1, "time/step": train_s, "time/eval": eval_s}]
    runs = {}
    for s, (ra, rb) in enumerate(pairs):
        runs[("a", s)] = {"records": ra, "rows": rows, "config": {}}
        runs[("b", s)] = {"records": rb, "rows": rows, "config": {}}
    return claim, {"runs": runs}


def test_the_current_allocation_has_the_claims_own_mde():
    pairs, _ = simulate(6, 0.03, np.random.default_rng(62))
    claim, data = claim_data(pairs)
    comp = components(claim, data)
    w = weights(pairs[0][0], "eval/accuracy_mean", None)
    d = np.array([w @ (np.array([[c == "1" for c in r] for r in ra["correct"]], float)
                       - np.array([[c == "1" for c in r] for r in rb["correct"]], float)
                       ).mean(axis=1) for ra, rb in pairs])
    own = judge(claim, d, np.zeros_like(d))
    now = next(a for a in comp["allocations"] if a["current"])
    if comp["observed"] >= comp["sampling"]:  # var(d) = seed + sampling exactly
        assert abs(now["mde"] - own["mde"]) < 1e-12
    assert now["seeds"] == 6 and now["samples"] == K
    # a run is 50x the evaluation (2 evaluations of P x K samples at 2 s): fewer samples
    # buy seeds only where sampling noise is small beside the seed's
    cost = comp["costs"]
    assert cost == {"train_s": 100.0, "sample_s": 2.0 / (K * P), "evals": 2.0}


def test_more_samples_win_where_sampling_dominates_and_evaluation_is_cheap():
    comp = {"n": 5, "samples": 4, "seed": 1e-5, "sampling": 1e-3}
    claim = {"kind": "direction", "expect": "greater"}
    cost = {"train_s": 600.0, "sample_s": 1e-3, "evals": 2.0}
    allocs = allocations(claim, comp, cost, 200, LEVEL)
    best = min(allocs, key=lambda a: a["mde"])
    assert best["samples"] == 32 and best["seeds"] >= 4  # a seed's cost barely moves
    assert best["mde"] < next(a for a in allocs if a["current"])["mde"]
    cost = {"train_s": 1.0, "sample_s": 1.0, "evals": 2.0}  # evaluation dominates the cost
    comp = {"n": 5, "samples": 4, "seed": 1e-3, "sampling": 1e-5}
    best = min(allocations(claim, comp, cost, 200, LEVEL), key=lambda a: a["mde"])
    assert best["samples"] < 4 and best["seeds"] > 5


def test_the_card_prints_the_split():
    pairs, _ = simulate(5, 0.03, np.random.default_rng(63))
    claim, data = claim_data(pairs)
    comp = components(claim, data)
    text = variance_text(comp)
    assert "training seed" in text and "evaluation sampling" in text
    assert "best" in text or "no other allocation of it does better" in text
    result = {"claim": "x", "sentence": "s", "kind": "direction", "verdict": "holds",
              "effect": 0.03, "ci": [0.01, 0.05], "n": 5, "metric": "eval/accuracy_mean",
              "variance": comp, "mde": 0.02, "p": 0.01}
    assert any(line.startswith("- noise: ") for line in card(1, result))
    assert components(claim | {"metric": "policy/entropy"}, data) is None
    data["runs"][("a", 0)]["records"] = None  # a run evaluated before the records
    assert components(claim, data) is None
