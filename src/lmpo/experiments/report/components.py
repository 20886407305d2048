"""Where an accuracy claim's noise comes from, and what would buy power.

A claim stays conditional on the fixed held-out set (every arm and seed evaluates the same
problems). Its per-seed paired difference d_s = sum_p w_p mean_j (x_A,pj - x_B,pj) (w_p:
the metric's tier-macro weight of problem p; x: correct or not, sample j of k) varies for
two reasons (the law of total variance): the training seed (which policies the two runs
end at, the warm start included where it is drawn per seed) and the evaluation's sampling
(which of each policy's answers were drawn). The second is estimated within each seed from
the per-sample records (`lmpo.evaluate`): V_s = sum_p w_p^2 s_p^2 / k, s_p^2 the variance
over j of the paired sample differences (0 for greedy decoding); the first is what is
left of the observed variance over seeds: max(0, var_s(d_s) - mean_s V_s).

With both, the minimum detectable effect (the claim kind's own MDE at the claim's level)
of any allocation follows: var(d) = seed + sampling x (k0 / k) x (P0 / P), n seeds, at the
runs' measured costs (training time per run, evaluation time per problem-sample), for the
same compute as the runs took. The problem x arm spread (how much the arms' difference
varies from problem to problem) is context: it would enter only if the problems were
resampled, and the claims do not generalise over problems.
"""

from __future__ import annotations

import math

import numpy as np

from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.seeds import LEVEL

SAMPLES = (1, 2, 4, 8, 16, 32)  # samples per problem the allocations try
PROBLEMS = (0.5, 1.0, 2.0)  # held-out set sizes (x the current one) they try
MIN_N = 3


def weights(records: dict, metric: str, trained: list[str] | None) -> np.ndarray | None:
    """Each problem's weight in `metric` (a tier-macro mean), or None for a metric the
    records cannot rebuild."""
    tiers = records["tiers"]
    if metric == "eval/accuracy_mean":
        chosen = set(tiers)
    elif metric in ("eval/accuracy_trained", "eval/accuracy_other"):
        inside = set(trained if trained is not None else tiers)
        chosen = inside if metric.endswith("trained") else set(tiers) - inside
    elif metric.startswith("eval/accuracy/"):
        chosen = {metric.split("/", 2)[2]}
    else:
        return None
    counts = {t: tiers.count(t) for t in chosen if t in tiers}
    if not counts:
        return None
    return np.array([1 / (len(counts) * counts[t]) if t in counts else 0.0 for t in tiers])


def bits(records: dict) -> np.ndarray:
    """[problems, k] 0/1 array of the records' correctness."""
    return np.array([[c == "1" for c in row] for row in records["correct"]], dtype=float)


def seed_terms(ra: dict, rb: dict, w: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(d_s, V_s, per-problem mean difference) of one seed's two evaluations."""
    if ra["problems"] != rb["problems"] or ra["samples"] != rb["samples"]:
        raise ValueError("the two evaluations differ in problems or samples")
    diff = bits(ra) - bits(rb)
    k = diff.shape[1]
    var = diff.var(axis=1, ddof=1) if k > 1 else np.zeros(len(diff))
    return float(w @ diff.mean(axis=1)), float((w ** 2) @ var / k), diff.mean(axis=1)


def split(pairs: list[tuple[dict, dict]], w: np.ndarray) -> dict:
    """The variance components of the paired difference over seeds (`pairs`: each seed's
    records of the two arms)."""
    d, v, per_problem = zip(*(seed_terms(a, b, w) for a, b in pairs), strict=True)
    d = np.array(d)
    observed = float(d.var(ddof=1))
    sampling = float(np.mean(v))
    spread = np.mean(per_problem, axis=0)[w > 0]
    return {"n": len(d), "samples": pairs[0][0]["samples"], "problems": int((w > 0).sum()),
            "observed": observed, "sampling": sampling, "seed": max(0.0, observed - sampling),
            "problem_sd": float(spread.std(ddof=1)) if spread.size > 1 else 0.0,
            "problem_se": float(spread.std(ddof=1) * math.sqrt(float((w ** 2).sum())))
            if spread.size > 1 else 0.0}


def costs(runs: list[dict], k: int, problems_total: int) -> dict | None:
    """Per run: training seconds (the steps' time) and evaluations; per problem-sample:
    evaluation seconds (the final evaluation's time over its k x problems)."""
    train, per_sample, evals = [], [], []
    for run in runs:
        rows = run["rows"]
        train.append(sum(r.get("time/step", 0.0) for r in rows))
        timed = [r["time/eval"] for r in rows if "time/eval" in r]
        if timed:
            per_sample.append(timed[-1] / (k * problems_total))
        evals.append(len(timed) + 1)  # and the evaluation before training
    if not per_sample:
        return None
    return {"train_s": float(np.mean(train)), "sample_s": float(np.mean(per_sample)),
            "evals": float(np.mean(evals))}


def allocations(claim: dict, comp: dict, cost: dict, problems_total: int,
                level: float) -> list[dict]:
    """The MDE of each allocation of the runs' compute: seeds x samples x problems."""
    kind, expect = claim_kind(claim["kind"]), claim.get("expect")
    k0, n0 = comp["samples"], comp["n"]

    def per_seed(k, m):  # the claim's two runs of one seed
        return 2 * (cost["train_s"] + cost["evals"] * cost["sample_s"] * k * problems_total * m)

    budget = n0 * per_seed(k0, 1.0)
    greedy = k0 == 1 and comp["sampling"] == 0
    out = []
    for k in ((1,) if greedy else SAMPLES):
        for m in PROBLEMS:
            n = int(budget // per_seed(k, m)) if (k, m) != (k0, 1.0) else n0
            if n < MIN_N:
                continue
            var = comp["seed"] + comp["sampling"] * (k0 / k) / m
            out.append({"seeds": n, "samples": k, "problems": m,
                        "mde": kind.mde_for(expect, math.sqrt(var), n, level),
                        "current": (k, m) == (k0, 1.0)})
    return out


def components(claim: dict, data: dict) -> dict | None:
    """The claim's variance components and allocations, or None (not an accuracy claim
    read at the end on two arms, or runs without per-sample records)."""
    kind = claim_kind(claim["kind"])
    arms = claim["arms"]
    if (not kind.paired or kind.over_levels or len(arms) != 2 or claim.get("reduce") != "final"
            or not str(claim["metric"]).startswith("eval/accuracy") or not claim.get("n")
            or claim.get("role") == "premise"):
        return None
    ran = {arm for arm, _ in data["runs"]}  # an arm that runs once stands at every level
    names = [f"{a}@{claim['level']}" if claim.get("level") and a not in ran else a
             for a in arms]
    seeds = list(claim["seeds"])[:claim["n"]]
    runs = [[data["runs"].get((name, s)) for s in seeds] for name in names]
    if any(r is None or not r.get("records") for arm in runs for r in arm):
        return None
    config = runs[0][0].get("config") or {}
    trained = (config.get("rollout") or {}).get("clusters")
    w = weights(runs[0][0]["records"], claim["metric"], trained)
    if w is None or len(seeds) < 2:
        return None
    comp = split([(a["records"], b["records"]) for a, b in zip(*runs, strict=True)], w)
    total = len(runs[0][0]["records"]["problems"])
    cost = costs(runs[0] + runs[1], comp["samples"], total)
    level = claim.get("holm_level") or LEVEL
    comp["allocations"] = allocations(claim, comp, cost, total, level) if cost else []
    comp["costs"] = cost
    return comp


def add_components(claims: list[dict], data: dict) -> None:
    """Each accuracy claim's `variance` entry, in place."""
    for claim in claims:
        comp = components(claim, data)
        if comp is not None:
            claim["variance"] = comp


def variance_text(v: dict, scale: float = 100.0, suffix: str = " pts") -> str:
    """The card's line: both components, the spread, the allocations' best MDE."""
    def sd(x):
        return f"{scale * math.sqrt(x):.3g}{suffix}"

    total = v["seed"] + v["sampling"]
    share = v["sampling"] / total if total > 0 else 0.0
    text = (f"SD of the paired difference over seeds: training seed {sd(v['seed'])}, "
            f"evaluation sampling {sd(v['sampling'])} ({100 * share:.3g}% of the variance; "
            f"{v['samples']} samples x {v['problems']} problems); problem x arm spread "
            f"SD {scale * v['problem_sd']:.3g}{suffix} (SE {scale * v['problem_se']:.3g}"
            f"{suffix} were the problems resampled)")
    allocs = v.get("allocations") or []
    now = next((a for a in allocs if a["current"]), None)
    best = min(allocs, key=lambda a: a["mde"]) if allocs else None
    if now and best:
        text += (f"; the same compute: {now['seeds']} seeds x {now['samples']} samples MDE "
                 f"{scale * now['mde']:.3g}{suffix} (these runs), " + (
                     "no other allocation of it does better" if best["mde"] >= now["mde"]
                     else f"best {best['seeds']} seeds x {best['samples']} samples x "
                          f"{best['problems']:g} problems MDE {scale * best['mde']:.3g}{suffix}"))
    return text
