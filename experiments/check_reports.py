"""Every committed report, regenerated from its committed runs, equals the committed one.

    python experiments/check_reports.py            # every report that has its sweep rows
    python experiments/check_reports.py drpo4 ebpo # some of them

Each report is written again from `experiments/results/<name>/sweep/` into a temporary
folder (its committed report.json beside it, so labels re-judged earlier keep their
earlier label, as `lmpo report --rejudge` does) and compared with the committed
report.json and report.md, apart from the setup's `commit` and `machine` (what made it
and where). Numbers in report.json compare within a relative 1e-9: a sum's last bits
depend on the BLAS build's order of additions (seen on one report, at 1e-14). Exits 1
naming each report that differs and its first differing entries.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
VOLATILE = ("commit", "machine")


def committed_reports() -> list[str]:
    """The names of every committed report that has its sweep rows."""
    return sorted(p.parent.name for p in RESULTS.glob("*/sweep")
                  if (p.parent / "report.json").exists())


def comparable_json(text: str) -> dict:
    data = json.loads(text)
    for key in VOLATILE:
        data.get("setup", {}).pop(key, None)
    return data


def mismatches(old, new, path: str = "") -> list[str]:
    """Where two JSON values differ (numbers within a relative 1e-9)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = [f"{path}/{k}: only in {'committed' if k in old else 'regenerated'}"
               for k in sorted(set(old) ^ set(new))]
        return out + [d for k in old if k in new for d in mismatches(old[k], new[k],
                                                                      f"{path}/{k}")]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (x, y) in enumerate(zip(old, new, strict=True))
                for d in mismatches(x, y, f"{path}[{i}]")]
    numbers = (int, float)
    if isinstance(old, numbers) and isinstance(new, numbers) and \
            not isinstance(old, bool) and not isinstance(new, bool):
        if old == new or math.isclose(old, new, rel_tol=1e-9, abs_tol=1e-300) or \
                (math.isnan(old) and math.isnan(new)):
            return []
    elif old == new:
        return []
    return [f"{path}: {old!r} -> {new!r}"]


def comparable_md(text: str) -> list[str]:
    # the setup line naming the commit and the machine is the only volatile line
    return [line for line in text.splitlines() if not line.startswith("- lmpo ")]


def regenerate(name: str) -> list[str]:
    """The differences between the committed report `name` and one regenerated from its
    rows ([] when equal)."""
    from rich.console import Console

    from lmpo.experiments.report.write import report

    folder = RESULTS / name
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.md"
        shutil.copy(folder / "report.json", out.with_suffix(".json"))
        report(folder / "sweep", out, console=Console(file=io.StringIO()), rejudge=True)
        new_json, new_md = out.with_suffix(".json").read_text(), out.read_text()
    diffs = []
    old, new = comparable_json((folder / "report.json").read_text()), comparable_json(new_json)
    diffs += [f"report.json: {d}" for d in mismatches(old, new)]
    a, b = comparable_md((folder / "report.md").read_text()), comparable_md(new_md)
    if a != b:
        diffs += [f"report.md: {d}" for d in difflib.unified_diff(a, b, lineterm="", n=0)]
    return diffs


def main(argv: list[str]) -> int:
    names = argv or committed_reports()
    unknown = sorted(set(names) - set(committed_reports()))
    if unknown:
        print(f"no committed report with its sweep rows: {', '.join(unknown)}; known: "
              f"{', '.join(committed_reports())}", file=sys.stderr)
        return 2
    bad = 0
    for name in names:
        diffs = regenerate(name)
        print(f"{name}: {'same' if not diffs else f'{len(diffs)} differing lines'}")
        for line in diffs[:12]:
            print(f"  {line}")
        bad += bool(diffs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
