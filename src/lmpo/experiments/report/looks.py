"""The looks of seeds until decided, replayed from the per-seed values
(`lmpo.experiments.design.sequential`), with the premises that gate the headline claims:

- **A premise is judged once, at the first look**, on its own seeds (its 95% interval);
  one still undecided there is judged again at each later look on its repeated interval
  (the look's O'Brien-Fleming nominal level for one claim), and keeps the first look at
  which it is decided.
- **No stop on an undecided premise**: a headline claim gated by a premise that is
  undecided at a look is held open at that look (neither rejected nor negligible), so the
  design adds seeds rather than stop on a claim whose setting is not yet established.
- **The effect per look** (descriptive): each headline claim's effect on each look's own
  block of seeds, with a test that the blocks agree (Welch's t for two blocks, the
  Alexander-Govern test for more: unequal variances either way). A block that differs
  (p < 0.05) is flagged, e.g. a look whose runs started from a warm start rebuilt
  elsewhere; the labels do not change.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from lmpo.experiments.design.premises import UNDECIDED
from lmpo.experiments.design.premises import status as premise_status
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.labels import judge
from lmpo.experiments.stats.seeds import ALPHA

HETEROGENEOUS = 0.05  # the blocks' test level at which a look is flagged (descriptive)


def heads(prepared: list[dict]) -> list[int]:
    """The claims the sequential design decides: the headline family as the runs were
    made (a re-analysis claim is judged on every seed run; a claim demoted by one keeps
    its place, `role_at_run`)."""
    return [i for i, p in enumerate(prepared) if p["claim"].get(
        "role_at_run", p["claim"].get("role", "headline")) == "headline"
        and not p["claim"].get("reanalysis")]


def premise_looks(exp, prepared: list[dict]) -> dict[int, dict]:
    """{prepared index of a premise: {look (0-based), n, alpha, status, statuses (one per
    look taken)}}: where each premise is decided (or its last look, undecided); {} for an
    experiment without sequential seeds."""
    from lmpo.experiments.design.sequential import look_sizes, nominal

    if not exp.design:
        return {}
    sizes = look_sizes(exp.design)
    out = {}
    for i, p in enumerate(prepared):
        claim = p["claim"]
        if claim.get("role") != "premise":
            continue
        a = np.asarray(p["a"], dtype=float)
        b = None if p["b"] is None else np.asarray(p["b"], dtype=float)
        statuses, chosen = [], None
        for k, n in enumerate(s for s in sizes if s <= a.size):
            alpha = ALPHA if k == 0 else nominal(tuple(sizes), ALPHA)[k]
            state = premise_status(judge(claim, a[:n], None if b is None else b[:n],
                                         alpha=alpha), claim)[0]
            if chosen is None or chosen["status"] == UNDECIDED:
                chosen = {"look": k, "n": n, "alpha": alpha, "status": state}
            statuses.append(chosen["status"])
        if chosen is not None:
            out[i] = chosen | {"statuses": statuses}
    return out


def held_looks(prepared: list[dict], plooks: dict[int, dict]) -> dict[int, set[int]]:
    """{prepared index of a headline claim: the looks at which a premise gating it is
    undecided}."""
    out: dict[int, set[int]] = {}
    for i in heads(prepared):
        claim = prepared[i]["claim"]
        for j, look in plooks.items():
            premise = prepared[j]["claim"]
            if claim.get("index") not in premise.get("gates", []) or (
                    premise.get("level") not in (None, claim.get("level"))
                    and not claim_kind(claim["kind"]).over_levels):
                continue
            out.setdefault(i, set()).update(
                k for k, state in enumerate(look["statuses"]) if state == UNDECIDED)
    return out


def sequential_record(exp, prepared: list[dict]) -> dict:
    """The sequential design replayed over the headline family (`lmpo.experiments.design.
    sequential.run_design`, holding a claim open at a look where a premise gating it is
    undecided), with `by_claim`: {claim index: its look}; {} without a design."""
    from lmpo.experiments.design.sequential import look_sizes, run_design

    if not exp.design:
        return {}
    idx = heads(prepared)
    values = []
    for i in idx:
        p, claim = prepared[i], prepared[i]["claim"]
        kind = claim_kind(claim_kind(claim["kind"]).judged_kind)
        values.append(kind.centered(claim, p["a"], p["b"]))
    held = held_looks(prepared, premise_looks(exp, prepared))
    design = run_design(values, [prepared[i]["claim"].get("min_effect") for i in idx],
                        look_sizes(exp.design), held=[held.get(i, set()) for i in idx])
    design["by_claim"] = {i: c for i, c in zip(idx, design["claims"], strict=True)
                          if "n" in c}
    return design


def sequential_looks(exp, prepared: list[dict]) -> dict[int, dict]:
    """{claim index: its look} for the headline claims of an experiment with sequential
    seeds; {} without."""
    looks = sequential_record(exp, prepared).get("by_claim", {})
    return {i: look | {"size": len(looks)} for i, look in looks.items()}


def look_effects(exp, prepared: list[dict]) -> list[dict]:
    """Per headline claim, its effect on each look's own block of seeds (mean and 95% t
    interval of the per-seed statistic) and the blocks' agreement test: [{at (the prepared
    index), blocks: [{look, seeds, n, effect, ci}], test, p, heterogeneous}]; [] without
    sequential seeds or with one look taken."""
    from lmpo.experiments.design.sequential import look_sizes

    if not exp.design:
        return []
    out = []
    for i in heads(prepared):
        p, claim = prepared[i], prepared[i]["claim"]
        kind = claim_kind(claim_kind(claim["kind"]).judged_kind)
        x = np.asarray(kind.centered(claim, p["a"], p["b"]), dtype=float)
        edges = [0, *(n for n in look_sizes(exp.design) if n <= x.size)]
        blocks = [x[lo:hi] for lo, hi in zip(edges, edges[1:], strict=False)]
        if len(blocks) < 2 or any(b.size < 2 for b in blocks):
            continue
        shift = kind.shift(claim)
        rows = []
        for k, block in enumerate(blocks):
            m, se = float(block.mean()), float(block.std(ddof=1)) / math.sqrt(block.size)
            half = float(sps.t.ppf(0.975, block.size - 1)) * se
            rows.append({"look": k + 1, "seeds": [p["seeds"][j] for j in range(
                edges[k], edges[k + 1])], "n": int(block.size), "effect": m + shift,
                "ci": [m + shift - half, m + shift + half]})
        if len(blocks) == 2:
            test, pv = "Welch t", float(sps.ttest_ind(*blocks, equal_var=False).pvalue)
        else:
            test, pv = "Alexander-Govern", float(sps.alexandergovern(*blocks).pvalue)
        out.append({"at": i, "blocks": rows, "test": test, "p": pv,
                    "heterogeneous": bool(pv < HETEROGENEOUS)})
    return out
