"""Premises: what must be true of the setting for a paper's claim to be tested there.

    premises:
      - kind: threshold                 # any claim kind, judged like a claim
        metric: policy/entropy
        reduce: last_over_first
        k: 20
        arms: [grpo_premise]            # an arm on its own seeds (`seed_offset`), usually
        statistic: value
        expect: below
        bound: 0.7
        sentence: "GRPO's entropy collapses"
        source: "the paper, Fig. 2: GRPO's entropy falls to a third within 200 steps"
        gates: [0, 1]                   # the claims it gates (default: every claim)
        at: L0                          # with conditions: as a claim's (default: all)

      - kind: direction                 # one arm at each level against itself at L0
        metric: eval/accuracy_trained
        arms: [grpo_premise]
        versus: L0
        expect: less
        sentence: "GRPO is less accurate under this precision than under bf16"
        source: "..."

A premise is judged per level on its own 95% interval, not adjusted with the paper's
claims: **met** (the interval lies on the premise's side of its bound, or the direction
holds), **failed** (the interval lies on the other side, or a direction premise is
contradicted or negligible) or **undecided** (anything else, its reason kept). A claim at a
level where a premise that gates it failed reads "premise not met"; where one is undecided,
"premise undecided" (the premise named), never a verdict about the paper. Its numbers are
kept and its own label is shown as `first`.

A premise must not be judged on the numbers the claims it gates use (a chance-low
baseline would both meet "the baseline degrades" and inflate "method - baseline"):
`check_premise_reads` refuses a premise that reads a metric of an arm that a claim it
gates reads too. Judge it on an arm of its own seeds (`seed_offset: 1000` runs the arm's
seed k as k + 1000), on a property of the setting (the warm start), or on another
quantity.
"""

from __future__ import annotations

from lmpo.errors import ConfigError
from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.kinds.direction import Direction

MET, FAILED, UNDECIDED = "met", "failed", "undecided"


def check_premises(premises, arms: list[str], n_claims: int, where: str,
                   conditions: dict | None) -> list[dict]:
    """The premises, each a claim with `source` (required) and `gates` (claim indices,
    default all); a ConfigError for a malformed one."""
    from lmpo.experiments.design.claims import check_claim

    if premises is None:
        return []
    if not isinstance(premises, list) or not all(isinstance(p, dict) for p in premises):
        raise ConfigError(f"{where}: premises must be a list of mappings (claims with a "
                          "source)")
    out = []
    for i, premise in enumerate(premises):
        at = f"{where}: premises[{i}]"
        source = premise.get("source")
        if not isinstance(source, str) or not source.strip():
            raise ConfigError(f"{at}: a premise needs its source (the paper's sentence or "
                              "figure it encodes)")
        gates = premise.get("gates", list(range(n_claims)))
        if not isinstance(gates, list) or not all(
                isinstance(g, int) and not isinstance(g, bool) and 0 <= g < n_claims
                for g in gates):
            raise ConfigError(f"{at}: gates must list claim indices in [0, {n_claims}), got "
                              f"{gates!r}")
        claim = {k: v for k, v in premise.items() if k not in ("source", "gates", "versus")}
        versus = premise.get("versus")
        if versus is not None:  # an arm at each level against itself at `versus`
            levels = list((conditions or {}).get("levels") or {})
            if versus not in levels or claim.get("kind") != Direction.name or not (
                    isinstance(claim.get("arms"), list) and len(claim["arms"]) == 1):
                raise ConfigError(f"{at}: versus names a condition level ({', '.join(levels)}"
                                  " or none) and takes a direction premise on one arm, read "
                                  "at each other level against itself at that level")
            (arm,) = claim["arms"]
            other = f"{arm}@{versus}"  # the same arm at `versus`, as expand() names it
            check_claim(claim | {"arms": [arm, other]}, [*arms, other], at, conditions)
            claim = claim | {"versus": versus}
        else:
            check_claim(claim, arms, at, conditions)
        out.append(claim | {"source": source, "gates": list(gates)})
    return out


def claim_reads(claim: dict) -> set[tuple[str, str]]:
    """The (arm, metric) pairs a claim (or premise) reads."""
    arms = [*claim["arms"], *([claim["comparator"]] if "comparator" in claim else [])]
    reads = {(a, claim["metric"]) for a in claim["arms"]}
    reads |= {(a, claim["x"]) for a in arms if "x" in claim}
    return reads


def check_premise_reads(premises: list[dict], claims: list[dict], where: str) -> None:
    """A premise may not read a metric of an arm that a claim it gates reads."""
    for i, premise in enumerate(premises):
        for j in premise["gates"]:
            shared = sorted(claim_reads(premise) & claim_reads(claims[j]))
            if shared:
                arm, metric = shared[0]
                raise ConfigError(
                    f"{where}: premises[{i}] reads {metric} of arm {arm!r}, which claims[{j}] "
                    "(a claim it gates) reads too: judge the premise on an arm of its own "
                    "seeds (an arm with `seed_offset`), on the warm start, or on another "
                    "quantity")


def status(result: dict, premise: dict | None = None) -> tuple[str, str]:
    """(met | failed | undecided, why) of a judged premise: met where its label holds;
    failed where a direction or equivalence premise is contradicted (or negligible), or a
    threshold premise's interval lies wholly on the wrong side of its bound; else
    undecided."""
    verdict = result["verdict"]
    if verdict == "holds":
        return MET, ""
    if verdict in ("contradicted", "negligible"):
        return FAILED, verdict
    why = claim_kind(premise["kind"]).premise_failed(premise, result) if premise else None
    if why:
        return FAILED, why
    return UNDECIDED, f"{verdict}" + (f": {result['reason']}" if result.get("reason") else "")


def gate(results: list[dict]) -> None:
    """Mark each claim result whose level has a failed or undecided premise that gates it
    (premise results have role "premise", with `gates` and their `premise_status`)."""
    premises = [r for r in results if r.get("role") == "premise"]
    for r in results:
        if r.get("role") == "premise":
            continue
        blocking = [p for p in premises if r.get("index") in p["gates"]
                    and p.get("level") in (None, r.get("level"))
                    or (claim_kind(r["kind"]).over_levels and r.get("index") in p["gates"])]
        failed = [p for p in blocking if p["premise_status"] == FAILED]
        undecided = [p for p in blocking if p["premise_status"] == UNDECIDED]
        worst = failed or undecided
        if not worst:
            continue
        p = worst[0]
        r["first"] = r.get("first", r["verdict"])
        r["verdict"] = "premise not met" if failed else "premise undecided"
        where = f" at {p['level']}" if p.get("level") else ""
        r["reason"] = (f"premise {p['premise_index'] + 1}{where} ({p['sentence']}): "
                       f"{p['premise_status']}")
