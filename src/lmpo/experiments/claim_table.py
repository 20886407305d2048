"""The report's claims: one table row per claim (and level), then each dose_response
claim's levels and trend. Rendered from report.json alone, so a committed report.md is
exactly `rendered(report.json)`."""

from __future__ import annotations

import math

from lmpo.experiments.stats import MIN_SEEDS

REJUDGED = "re-judged (exploratory)"


def fmt(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.2e}" if abs(x) < 0.01 and x != 0 else f"{x:.3f}"


def span(ci) -> str:
    return f"[{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "-"


def shown_verdict(c: dict) -> str:
    """The label with its reason where the reason is the label's (not only the MDE); a
    descriptive level's label says so; a re-judged one names its earlier label."""
    reason = c.get("reason") or ""
    out = f"**{c['verdict']}**" + (f" ({reason})" if reason and not reason.startswith("MDE")
                                   else "")
    if c.get("role") == "descriptive":
        out += " (descriptive)"
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
    return f"{metric} {fmt(eng['value'])} {span(eng['ci'])} (floor {eng['floor']:g})"


def claim_cell(c: dict) -> str:
    text = c["claim"].replace("|", "\\|")
    return f"`{c['level']}` {text}" if c.get("level") else text


def claim_lines(claims: list[dict]) -> list[str]:
    lines = ["", "## Claims", ""]
    if not claims:
        return lines + ["No claims in this experiment."]
    lines += [f"This experiment makes {len(claims)} claims. Intervals: a paired t interval "
              f"on the per-seed statistic below 10 seeds, a paired bootstrap from 10 seeds "
              f"and for spread claims. The label comes from the Holm-adjusted interval "
              f"(over the claims of its family: headline, secondary or descriptive), the "
              f"unadjusted 95% interval is shown beside it. MDE: the smallest effect the "
              f"seeds detect with 80% power at the labelling level; below {MIN_SEEDS} seeds: "
              f"insufficient seeds. Engagement: the pair's same-batch distance (per-token "
              f"gradient weights, or stop decisions); \"not engaged\" only below the floor "
              f"with an interval that includes the null.", "",
              "| claim | the paper | seeds | effect [95% CI] | Holm-adjusted CI | MDE "
              "(min_effect) | engagement | verdict |", "|---|---|---|---|---|---|---|---|"]
    for c in claims:
        sentence = c["sentence"].replace("|", "\\|")
        power = f"{fmt(c.get('mde'))} ({fmt(c.get('min_effect'))})"
        lines.append(f"| {claim_cell(c)} | {sentence} | {c['n']} | {fmt(c['effect'])} "
                     f"{span(c['ci'])} | {span(c.get('ci_holm'))} | {power} | "
                     f"{shown_engagement(c)} | {shown_verdict(c)} |")
    for c in claims:
        if c["kind"] == "dose_response":
            lines += dose_lines(c)
    return lines


def dose_lines(c: dict) -> list[str]:
    """A dose_response claim: the effect and the pair's engagement at every level, then the
    trend (the fitted change over the dose range, and the slope per unit dose)."""
    x = c.get("x")
    lines = ["", f"### Dose-response: {c['claim']}", "",
             f"| level | dose |{f' {x} |' if x else ''} effect [95% CI] | Holm-adjusted CI "
             "(over the levels) | engagement |",
             "|---|---|" + ("---|" if x else "") + "---|---|---|"]
    for lv in c.get("levels", []):
        xs = f" {fmt(lv.get('x'))} |" if x else ""
        lines.append(f"| {lv['level']} | {fmt(lv['dose'])} |{xs} {fmt(lv.get('effect'))} "
                     f"{span(lv.get('ci'))} | {span(lv.get('ci_holm'))} | "
                     f"{shown_engagement(lv)} |")
    lo, hi = c.get("dose_range", [math.nan, math.nan])
    lines += ["", f"Trend: the change from dose {fmt(lo)} to {fmt(hi)} by each seed's "
                  f"least-squares line, {fmt(c['effect'])} {span(c['ci'])} (Holm-adjusted "
                  f"{span(c.get('ci_holm'))}); slope {fmt(c.get('slope_per_dose'))} per unit "
                  f"dose; {shown_verdict(c)}."]
    return lines
