"""The README's "Results" rows, made from a committed report.json (never typed by hand).

One row per claim: paper, the paper's sentence and the claim as measured, verdict,
effect [95% CI], link to the report. `lmpo report DIR --readme PAPER` prints them;
tests/test_reproductions.py checks that the README's rows are exactly these.
"""

from __future__ import annotations

import json
from pathlib import Path

from lmpo.experiments.report import fmt, markdown, shown_verdict

HEADER = ["| paper | claim (the paper's words; what was measured) | verdict | "
          "effect [95% CI] | report |", "|---|---|---|---|---|"]


def load(path: str | Path) -> dict:
    path = Path(path)
    return json.loads((path / "report.json" if path.is_dir() else path).read_text())


def readme_rows(rep: dict, paper: str, link: str) -> list[str]:
    rows = []
    for c in rep["claims"]:
        sentence, claim = (x.replace("|", "\\|") for x in (c["sentence"], c["claim"]))
        rows.append(f"| {paper} | {sentence}; `{claim}` | {shown_verdict(c)} | "
                    f"{fmt(c['effect'])} [{fmt(c['ci'][0])}, {fmt(c['ci'][1])}] "
                    f"(n={c['n']}) | [report]({link}) |")
    return rows


def rendered(rep: dict) -> str:
    """report.md as `lmpo report` writes it from these numbers."""
    return markdown(rep["setup"], rep["arms"], rep["claims"], rep["plots"])
