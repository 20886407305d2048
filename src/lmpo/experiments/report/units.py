"""A claim's numbers in its metric's units, at a precision a reader takes in.

- accuracy and other shares of correct answers: points (x 100), one decimal, "pts";
- entropy: nats, 3 significant digits;
- rollout tokens: whole tokens with thousands separators;
- ratios (a spread claim's std ratio, a threshold or equivalence on a ratio, a
  last-over-first reduction): 3 significant digits and "x";
- anything else: 3 significant digits in the metric's own units.

Differences carry their sign ("+15.8 [+6.2, +25.4] pts"); never an exponent.
"""

from __future__ import annotations

import math

from lmpo.experiments.stats.kinds import claim_kind

POINTS = ("eval/accuracy", "reward/accuracy", "accuracy")


def unit(metric: str, kind: str | None = None, statistic: str | None = None,
         reduce: str | None = None) -> tuple[float, str, str]:
    """(scale, suffix, style) for a claim's statistic (its kind's units where the kind
    decides them: `ClaimKind.unit`); style: points | sig | tokens | ratio."""
    own = claim_kind(kind).unit(statistic) if kind else None
    if own:
        return own
    if statistic == "ratio" or reduce == "last_over_first":
        return 1.0, " ×", "ratio"
    if any(metric.startswith(p) for p in POINTS[:2]) or metric.endswith("/accuracy"):
        return 100.0, " pts", "points"
    if metric.startswith("policy/entropy"):
        return 1.0, " nats", "sig"
    if metric.startswith("tokens/"):
        return 1.0, " tokens", "tokens"
    return 1.0, "", "sig"


def sig(x: float, digits: int = 3, sign: bool = False) -> str:
    """`x` to `digits` significant digits in fixed notation."""
    if x == 0:
        return "0" if not sign else "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    text = f"{x:{'+' if sign else ''},.{decimals}f}"
    return text


def number(x, style: str, scale: float = 1.0, sign: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    v = x * scale
    if style == "points":
        return f"{v:+.1f}" if sign else f"{v:.1f}"
    if style == "tokens":
        return f"{v:+,.0f}" if sign else f"{v:,.0f}"
    return sig(v, 3, sign and style != "ratio")


def value_ci(x, ci, metric: str, kind: str | None = None, statistic: str | None = None,
             reduce: str | None = None, sign: bool = True) -> str:
    """"+15.8 [+6.2, +25.4] pts"."""
    scale, suffix, style = unit(metric, kind, statistic, reduce)
    sign = sign and style != "ratio" and statistic != "value"
    body = number(x, style, scale, sign)
    if ci:
        body += f" [{number(ci[0], style, scale, sign)}, {number(ci[1], style, scale, sign)}]"
    return body + suffix


def amount(x, metric: str, kind: str | None = None, statistic: str | None = None,
           reduce: str | None = None) -> str:
    """A size (an MDE, a min_effect) in the claim's units, unsigned."""
    scale, suffix, style = unit(metric, kind, statistic, reduce)
    return number(x, style, scale, sign=False) + suffix
