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

from lmpo.errors import ConfigError

# what a re-analysis may add to a claim written before its runs: a test at the paper's
# strength, a decomposition by the method's twin or an anchor-matched arm, a cited bound
REANALYSIS_KEYS = ("strength", "twin", "anchor", "bound_source")
REANALYSIS_FILE = "reanalysis.yaml"


def with_reanalysis(saved: dict, root: Path) -> dict:
    """The saved experiment (as its runs were made) with the keys of `reanalysis.yaml`
    beside the run directory, if any:

        claims:            # by index in the saved experiment's claims
          0: {strength: {multiple: 10, fraction: 0.5}}
          1: {twin: is_pg}
        notes:             # optional: what a re-analysis of the runs found, printed
          - "..."          # after the experiment's own notes, marked as a re-analysis

    A claim that gains `strength` is marked `reanalysis: true` (its label says so). The
    run record itself (`sweep/experiment.yaml`) is never edited."""
    from lmpo.yamlfile import read_yaml_file

    path = root.parent / REANALYSIS_FILE
    if not path.exists():
        return saved
    data = read_yaml_file(path, what="re-analysis")
    extra, notes = data.get("claims") or {}, data.get("notes") or []
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise ConfigError(f"{path}: notes must be a list of strings")
    claims = list(saved.get("claims") or [])
    for index, keys in extra.items():
        where = f"{path}: claims {index}"
        if not isinstance(index, int) or not 0 <= index < len(claims) or \
                not isinstance(keys, dict):
            raise ConfigError(f"{where}: an index into the saved claims (0-{len(claims) - 1}) "
                              "mapping to the keys added")
        bad = sorted(set(keys) - set(REANALYSIS_KEYS))
        if bad:
            raise ConfigError(f"{where}: a re-analysis adds only {', '.join(REANALYSIS_KEYS)}; "
                              f"got {bad}")
        claims[index] = claims[index] | keys | (
            {"reanalysis": True} if "strength" in keys else {})
    return saved | {"claims": claims} | ({"notes": list(saved.get("notes") or []) + [
        f"Re-analysis of the committed runs: {n}" for n in notes]} if notes else {})


def claim_key(c: dict) -> tuple:
    """A claim across reports: what it compares (premise or claim, its index in the file,
    level, kind, part of a split, arms), not its text, which shows a bound that a rule may
    change."""
    return (c.get("role") == "premise", c.get("index"), c.get("level"), c["kind"],
            c.get("split"), tuple(c.get("arms") or ()))


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
