"""The report's claims: a short table (one row per claim: its label and effect in the
metric's units), then one card per claim with its numbers, its test and its audits, then
each dose_response claim's levels and trend. Rendered from report.json alone, so a
committed report.md is exactly `rendered(report.json)`.

A comparison (metric, arm pair, level) carries one label: a dose_response claim's
per-level rows show effects and intervals (descriptive, adjusted over its levels) and
the label of the same comparison's level claim where the experiment makes one.
"""

from __future__ import annotations

import math

from lmpo.experiments.report.components import variance_text
from lmpo.experiments.report.units import amount, value_ci
from lmpo.experiments.stats.kinds import claim_kind

REJUDGED = "re-judged"


def fmt(x) -> str:
    """A plain number for the per-arm tables: 3 significant digits, never an exponent."""
    from lmpo.experiments.report.units import sig

    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return sig(float(x), 3)


def span(ci) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "-"


def units_of(c: dict) -> dict:
    """The keyword arguments `value_ci` / `amount` need for a claim's statistic."""
    metric = c.get("metric") or c["claim"].split(":")[0].split(" (")[0]
    statistic = c.get("statistic")
    if statistic is None and claim_kind(c["kind"]).statistics:
        text = c["claim"]
        statistic = "ratio" if " / " in text.split(":", 1)[-1] else None
    reduce = c.get("reduce") or ("last_over_first" if "/ first" in c["claim"] else None)
    return {"metric": metric, "kind": claim_kind(c["kind"]).judged_kind,
            "statistic": statistic, "reduce": reduce}


def effect_text(c: dict, key: str = "ci") -> str:
    return value_ci(c.get("effect"), c.get(key), **units_of(c))


def label_reason(c: dict) -> str:
    """The label's reason in the claim's units: an MDE against min_effect, an interval
    inside +-min_effect; an audit's reason as written; "" where the reason is only the
    MDE of a decided claim."""
    reason, u = c.get("reason") or "", units_of(c)
    verdict, small, kind = c["verdict"], c.get("min_effect"), claim_kind(c["kind"])
    if verdict == "underpowered" and kind.bound_key == "margin" and c.get("margin"):
        return f"MDE {amount(c.get('mde'), **u)} > margin {amount(c['margin'], **u)}"
    if verdict == "underpowered" and kind.bound_key == "min_effect" and \
            not kind.mde_is_ratio and small:
        return f"MDE {amount(c.get('mde'), **u)} > min_effect {amount(small, **u)}"
    if verdict == "negligible" and small is not None:
        return f"interval inside ±{amount(small, **u)}"
    if reason.startswith("smaller than min_effect") and small is not None:
        return f"smaller than min_effect {amount(small, **u)}"
    return "" if reason.startswith("MDE") and verdict != "underpowered" else reason


def shown_verdict(c: dict) -> str:
    """The label with its reason where the reason is the label's (not only the MDE), in
    the claim's units; a descriptive claim's label says so; a re-judged one names its
    earlier label."""
    reason = label_reason(c)
    out = f"**{c['verdict']}**" + (f" via {c['via']}" if c.get("via") else "") + (
        f" ({reason})" if reason else "")
    if c.get("unadjusted"):
        point, lo, hi = c["unadjusted"]
        out += f"; unadjusted {value_ci(point, [lo, hi], **units_of(c))}"
    if c.get("reanalysis"):
        out += " (re-analysis of the committed runs)"
    if c.get("role") == "descriptive":
        out += " (descriptive)"
    if c.get("look"):
        out += f" (look {c['look']}, {c['n']} seeds)"
    if c.get("rejudged"):
        out += f"; {REJUDGED}, was: {c['rejudged']}"
    return out


def shown_engagement(c: dict) -> str:
    eng = c.get("engagement")
    if not eng:
        return "-"
    if eng.get("status") == "not measured":
        return "not measured"
    metric = eng["metric"].rsplit("/", 1)[-1]
    at = f" at {eng['at']} (highest over levels)" if eng.get("at") else ""
    return f"{metric} {fmt(eng['value'])} {span(eng['ci'])}{at} (floor {eng['floor']:g})"


def claim_cell(c: dict) -> str:
    text = c["claim"].replace("|", "\\|")
    return f"`{c['level']}` {text}" if c.get("level") else text


def test_line(c: dict) -> str:
    """How the label was reached: p, the Holm-adjusted p in its family, the interval at
    the level the step-down used."""
    if c.get("p") is None or (isinstance(c["p"], float) and math.isnan(c["p"])):
        return "not tested"
    family = c.get("family") or c.get("role") or "headline"
    size = c.get("family_size")
    fam = f"{family} family of {size}" if size else f"{family} family"
    test = claim_kind(c["kind"]).test_name
    adj = c.get("p_adj")
    adj_text = f", Holm-adjusted {pval(adj)}" if adj is not None else ""
    level = c.get("holm_level")
    at = f"; interval at {100 * level:.4g}%: {effect_text(c, 'ci_holm')}" \
        if level and c.get("ci_holm") else ""
    return f"{test} {pval(c['p'])}{adj_text} ({fam}){at}"


def pval(p) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return "-"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def card(i: int, c: dict) -> list[str]:
    u = units_of(c)
    sentence = c["sentence"].strip().replace("\n", " ")
    improve = c.get("p_improve")
    better = (f"; the first arm ahead in {improve * c['n']:.3g} of {c['n']} seeds"
              if improve is not None and not claim_kind(c["kind"]).over_levels else "")
    power = f"MDE {amount(c.get('mde'), **u)}" + (
        f" (min_effect {amount(c['min_effect'], **u)})" if c.get("min_effect") else "")
    missing = c.get("unreached") or {}
    left = ("; never reached the drift level, left out: " + ", ".join(
        f"{arm} seeds {', '.join(map(str, seeds))}" for arm, seeds in missing.items())
        if missing else "")
    return [f"### {i}. {claim_cell(c)}", "", f"> {sentence}", "",
            f"- **verdict**: {shown_verdict(c)}",
            f"- effect: {effect_text(c)} (95%, n = {c['n']}{better}{left})",
            f"- test: {test_line(c)}"] + (
        [f"- exact: {exact_text(c['exact'])}"] if c.get("exact") else []) + [
            f"- power: {power}"] + (
        [f"- noise: {variance_text(c['variance'])}"] if c.get("variance") else []) + [
            f"- engagement: {shown_engagement(c)}{why_unmeasured(c)}"] + (
        [f"- the method's twin ({c['twin'].get('comparator', 'not measured')}): "
         f"{shown_engagement({'engagement': c['twin']})}"] if c.get("twin") else []) + (
        [f"- bound: {bound_text(c)}"] if c.get("effect_bound") else []) + (
        [f"- not measured (no confound read): {', '.join(c['unmeasured'])}"
         + (" (the effective step: rows older than its logging)"
            if "update_norm" in c["unmeasured"] else "")] if c.get("unmeasured") else []) + (
        [f"- held open at look {c['look']}: {c['held']}"] if c.get("held") else []) + (
        [f"- per look (descriptive): {per_look_text(c)}"] if c.get("per_look") else []) + [""]


def exact_text(e: dict) -> str:
    """The exact tests beside the t (lmpo.experiments.stats.exact)."""
    flag = (f" — **disagrees with the t-based label** at its level {e['alpha']:.4g}"
            if e["disagrees"] else "" if e["attainable"]
            else f" (cannot reach the label's level {e['alpha']:.4g} at this n)")
    return (f"sign-flip p {pval(e['sign_flip_p'])}, Wilcoxon signed-rank p "
            f"{pval(e['wilcoxon_p'])}; the smallest attainable {e['min_p']:.4g}{flag}")


def per_look_text(c: dict) -> str:
    """Each look's own block of seeds: its effect and 95% interval, and whether the blocks
    agree (lmpo.experiments.report.looks)."""
    pl, u = c["per_look"], units_of(c)
    blocks = "; ".join(f"look {b['look']} ({b['n']} seeds) {value_ci(b['effect'], b['ci'], **u)}"
                       for b in pl["blocks"])
    flag = " — **heterogeneous**" if pl["heterogeneous"] else ""
    return f"{blocks}; {pl['test']} p {pval(pl['p'])}{flag}"


def bound_text(c: dict) -> str:
    """A claim's bound in the metric's units, as a multiple of the paired SD and as a share
    of the reference gain, with its rule (lmpo.experiments.report.bounds)."""
    b, u = c["effect_bound"], units_of(c)
    if b.get("value") is None:
        return f"none declared; {b['rule']}"
    sd, share = b.get("sd_multiple", math.nan), b.get("gain_share", math.nan)
    out = (f"{b['key']} {amount(b['value'], **u)} = {fmt(sd)} x the paired SD = "
           f"{100 * share:.3g}% of the reference gain ({amount(b['ref_gain'], **u)}, "
           f"{b['seeds']}, n = {b['n']}); {b['rule']}")
    if b.get("declared") is not None and b["declared"] != b["value"]:
        out += f"; the file declared {amount(b['declared'], **u)}"
    elif b["rule"].startswith("declared") and b.get("rule_value"):
        out += f"; the rule would give {amount(b['rule_value'], **u)}"
    return out


def why_unmeasured(c: dict) -> str:
    """The reason a claim's engagement was not measured, for its detail section (the tables
    keep the short "not measured")."""
    eng = c.get("engagement") or {}
    unmeasured = eng.get("status") == "not measured" and eng.get("reason")
    return f" ({eng['reason']})" if unmeasured else ""


def premise_lines(premises: list[dict]) -> list[str]:
    """The premises, judged per level before the claims (lmpo.experiments.design.premises)."""
    if not premises:
        return []
    lines = ["", "## Premises", "",
             "What must hold here for the paper's claims to be tested, each judged on its "
             "own 95% interval (not adjusted with the claims). A claim gated by a premise "
             "that failed reads \"premise not met\", by an undecided one \"premise "
             "undecided\".", "",
             "| # | premise | status | value [95% CI] | gates claims | source |",
             "|---|---|---|---|---|---|"]
    for c in premises:
        why = f" ({c['reason']})" if c.get("reason") and c["verdict"] != "met" else ""
        gates = ", ".join(str(g + 1) for g in c["gates"])
        lines.append(f"| {c['premise_index'] + 1} | {claim_cell(c)} | **{c['verdict']}**"
                     f"{why} | {effect_text(c)} | {gates} | {c['source']} |")
    return lines + [""]


def claim_lines(claims: list[dict]) -> list[str]:
    premises = [c for c in claims if c.get("role") == "premise"]
    claims = [c for c in claims if c.get("role") != "premise"]
    lines = premise_lines(premises) + ["", "## Claims", ""]
    if not claims:
        return lines + ["No claims in this experiment."]
    lines += [f"This experiment makes {len(claims)} claims. Each label comes from Holm's "
              "step-down within its family (headline, secondary or descriptive); the "
              "interval beside it is the one at the level the step-down used, the 95% "
              "interval is unadjusted. How a label is decided: docs/reproductions.md.", "",
              "| # | claim | verdict | effect [95% CI] |", "|---|---|---|---|"]
    for i, c in enumerate(claims, 1):
        lines.append(f"| {i} | {claim_cell(c)} | {shown_verdict(c)} | {effect_text(c)} |")
    lines.append("")
    for i, c in enumerate(claims, 1):
        lines += card(i, c)
        if claim_kind(c["kind"]).over_levels:
            lines += dose_lines(c, claims)
    return lines


def level_label(c: dict, level: str, claims: list[dict]) -> str:
    """The label of the level claim that makes the same comparison (metric, arms, reduce)
    at `level`, or '-'."""
    for other in claims:
        if other["kind"] == claim_kind(c["kind"]).judged_kind and \
                other.get("level") == level and \
                other.get("metric") == c.get("metric") and other.get("arms") == c.get(
                    "arms") and other["claim"].split(":")[0] == c["claim"].split(":")[0]:
            return f"{other['verdict']} (claim {claims.index(other) + 1})"
    return "-"


def dose_lines(c: dict, claims: list[dict]) -> list[str]:
    """A dose_response claim: the effect and the pair's engagement at every level, then the
    trend (the fitted change over the dose range, and the slope per unit dose)."""
    x = c.get("x")
    u = units_of(c)
    lines = ["#### Per level (descriptive)", "",
             f"| level | dose |{f' {x} |' if x else ''} effect [95% CI] | adjusted over "
             "the levels | engagement | the level claim's label |",
             "|---|---|" + ("---|" if x else "") + "---|---|---|---|"]
    for lv in c.get("levels", []):
        xs = f" {fmt(lv.get('x'))} |" if x else ""
        adj = value_ci(None, lv.get("ci_holm"), **u).replace("- ", "", 1) \
            if lv.get("ci_holm") else "-"
        lines.append(f"| {lv['level']} | {fmt(lv['dose'])} |{xs} "
                     f"{value_ci(lv.get('effect'), lv.get('ci'), **u)} | {adj} | "
                     f"{shown_engagement(lv)} | {level_label(c, lv['level'], claims)} |")
    lo, hi = c.get("dose_range", [math.nan, math.nan])
    lines += ["", f"Trend: the change from dose {fmt(lo)} to {fmt(hi)} by each seed's "
                  f"least-squares line, {effect_text(c)}; slope {fmt(c.get('slope_per_dose'))}"
                  " per unit dose.", ""]
    return lines


def sequential_lines(seq: dict) -> list[str]:
    """The sequential design's record: the looks, the alpha spent by each, why it stopped."""
    if not seq:
        return []
    d = seq["design"]
    lines = ["## Seeds until decided", "",
             f"Seeds {d['first']}-{d['first'] + d['max'] - 1} in blocks: a look at "
             f"{d['start']} seeds, then every {d['step']} more up to {d['max']}, while a "
             "headline claim is undecided (Lan-DeMets O'Brien-Fleming spending, Holm within "
             "each look, a stop as negligible inside +-min_effect, repeated confidence "
             "intervals; docs/reproductions.md).", "",
             "| look | seeds | alpha spent by then | boundary (nominal p, all claims open) |",
             "|---|---|---|---|"]
    for k, look in enumerate(seq["looks"], 1):
        lines.append(f"| {k} | {look['n']} | {look['alpha_spent']:.4f} | "
                     f"{look.get('level', float('nan')):.4g} |")
    why = {"decided": "every headline claim decided", "max seeds": "max seeds reached",
           "more seeds needed": f"undecided: the next look is at {seq.get('next')} seeds"}
    lines += ["", f"Stopped: {why.get(seq['stopped'], seq['stopped'])}.", ""]
    return lines
