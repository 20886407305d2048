"""Committed reports regenerate unchanged from their committed runs: two small ones here
(`make check-reports` checks every one, outside `make test`), so a change to the report
code that moves a label, a number or a line of report.md fails before it lands."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def checker():
    spec = importlib.util.spec_from_file_location(
        "check_reports", ROOT / "experiments" / "check_reports.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["real_cegppo", "precision_real"])
def test_a_committed_report_regenerates_unchanged(name):
    assert name in checker().committed_reports()
    assert checker().regenerate(name) == []


def test_the_comparison_sees_a_changed_label_and_ignores_the_last_bits():
    check = checker()
    old = {"setup": {"commit": "a"}, "claims": [{"verdict": "holds", "effect": 0.1}]}
    assert check.mismatches(old, {"setup": {"commit": "a"}, "claims": [
        {"verdict": "holds", "effect": 0.1 * (1 + 1e-13)}]}) == []
    assert check.mismatches(old, {"setup": {"commit": "a"}, "claims": [
        {"verdict": "negligible", "effect": 0.1}]}) == ["/claims[0]/verdict: 'holds' -> "
                                                         "'negligible'"]
    assert check.mismatches(old, {"setup": {}, "claims": old["claims"]}) == [
        "/setup/commit: only in committed"]
    assert check.comparable_json('{"setup": {"commit": "x", "machine": "y", "seeds": 3}}') \
        == {"setup": {"seeds": 3}}
