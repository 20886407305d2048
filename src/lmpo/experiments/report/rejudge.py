"""Re-judging a committed report by today's rules, from its committed runs.

Every committed third-edition report keeps its runs' rows (`experiments/results/<name>/
sweep/`), so today's rules (docs/reproductions.md) are applied by regenerating the report
from them, never from the old report's summary numbers:

    lmpo report experiments/results/drpo/sweep --out experiments/results/drpo/report.md \
        --rejudge

With `--rejudge` the report already at `--out` gives each claim's earlier label: a claim
whose label changes keeps it in `rejudged` and reads "re-judged, was: X",
since the rules that changed it were written after those runs were seen. `changes`
lists them (old -> new) for a release note.
"""

from __future__ import annotations

import json
from pathlib import Path


def claim_key(c: dict) -> tuple:
    return c["claim"], c.get("level")


def earlier_labels(path: Path) -> dict[tuple, list[tuple[str, str | None]]]:
    """{(claim, level): [(label, its own earlier label or None), ...]} of the report.json at
    `path` (in the order they appear: a repeated claim is matched by position), or {}."""
    if not path.exists():
        return {}
    out: dict[tuple, list] = {}
    for c in json.loads(path.read_text()).get("claims", []):
        out.setdefault(claim_key(c), []).append((c["verdict"], c.get("rejudged")))
    return out


def carry(claims: list[dict], earlier: dict[tuple, list]) -> list[tuple[str, str, str]]:
    """Mark each claim whose label differs from its earlier one (`rejudged`), and keep an
    unchanged label's own earlier one; returns (claim, old, new) for every change."""
    seen: dict[tuple, int] = {}
    changes = []
    for c in claims:
        key = claim_key(c)
        k = seen.get(key, 0)
        seen[key] = k + 1
        old = earlier.get(key, [])
        if k >= len(old):
            continue
        label, before = old[k]
        if label != c["verdict"]:
            c["rejudged"] = label
            at = f"`{c['level']}` " if c.get("level") else ""
            changes.append((f"{at}{c['claim']}", label, c["verdict"]))
        elif before:
            c["rejudged"] = before
    return changes
