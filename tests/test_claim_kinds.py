"""Claim kinds are a registry: each kind's module declares its schema, test, label and
units; nothing outside it names the kind; a new kind (docs/your-method.md's example) is
one module, judged and printed by the same code as every other."""

from __future__ import annotations

import ast
import math
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from lmpo.errors import ConfigError
from lmpo.experiments.design.claims import check_claim, describe_claim
from lmpo.experiments.report.claim_table import test_line as how_tested
from lmpo.experiments.report.claim_table import units_of
from lmpo.experiments.stats.kinds import CLAIM_KINDS, ClaimKind, claim_kind
from lmpo.experiments.stats.labels import judge
from tests.doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "lmpo"
KINDS = CLAIM_KINDS.names()
ARMS = ["a", "b", "c", "d"]


def example(name: str) -> dict:
    """A well-formed claim of kind `name`, from what the kind declares."""
    kind = claim_kind(name)
    claim = {"kind": name, "metric": "eval/accuracy_trained", "arms": ["a", "b"],
             "sentence": "s"}
    fill = {"expect": kind.expects[0] if kind.expects else None, "margin": 0.1,
            "bound": 0.5, "statistic": kind.statistics[0] if kind.statistics else None}
    return claim | {k: fill[k] for k in kind.needs}


def test_the_registry_holds_the_five_kinds_each_in_its_own_module():
    assert KINDS == ["direction", "dose_response", "equivalence", "spread", "threshold"]
    for name in KINDS:
        kind = claim_kind(name)
        assert isinstance(kind, ClaimKind) and kind.name == name
        assert type(kind).__module__ == f"lmpo.experiments.stats.kinds.{name}"
        meta = CLAIM_KINDS.meta(name)
        assert meta["title"] and meta["summary"]
        assert claim_kind(kind.judged_kind).over_levels is False


def test_no_module_outside_a_kinds_own_names_it():
    """A kind's name as a string appears only in its own module, so a new kind touches one
    file (claim *keys*, such as `matched` or `margin`, are keys, not kinds)."""
    files = [*(SRC / "experiments").rglob("*.py"), *SRC.glob("cli*.py")]
    hits = []
    for path in files:
        own = path.parent.name == "kinds" and path.stem
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in KINDS and node.value != own:
                hits.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not hits, hits


@pytest.mark.parametrize("name", [k for k in KINDS if not claim_kind(k).over_levels])
def test_every_kind_checks_describes_judges_and_prints_a_claim(name):
    claim = example(name)
    check_claim(claim, ARMS, "claims[0]")
    text = describe_claim(claim)
    assert text.startswith("eval/accuracy_trained: ")
    rng = np.random.default_rng(0)
    a, b = 0.5 + rng.normal(0, 0.02, 6), 0.5 + rng.normal(0, 0.02, 6)
    out = judge(claim, a, b)
    assert out["verdict"] in ("holds", "contradicted", "negligible", "underpowered",
                              "direction only", "inconclusive", "not met", "not shown")
    assert out["method"] and math.isfinite(out["p"]) and math.isfinite(out["mde"])
    card = {"kind": name, "claim": text} | out
    assert how_tested(card).startswith(claim_kind(name).test_name + " ")
    assert units_of(card)["kind"] == claim_kind(name).judged_kind
    missing = {k: v for k, v in claim.items() if k not in ("kind", "metric", "arms",
                                                           "sentence")}
    for key in missing:
        with pytest.raises(ConfigError, match=f"a {name} claim needs"):
            check_claim({k: v for k, v in claim.items() if k != key}, ARMS, "claims[0]")


def test_an_unknown_kind_is_refused_in_one_line_with_a_hint():
    with pytest.raises(ConfigError, match=r"kind must be one of direction, dose_response, "
                       r"equivalence, spread, threshold, got 'directoin' \(did you mean "
                       r"'direction'\?\)"):
        check_claim({"kind": "directoin", "metric": "m", "arms": ["a", "b"], "sentence": "s",
                     "expect": "greater"}, ARMS, "claims[0]")


def test_a_key_of_another_kind_is_named_as_such():
    with pytest.raises(ConfigError, match="x is a dose_response claim's key"):
        check_claim(example("direction") | {"x": "rollout/logp_mismatch"}, ARMS, "c")


@pytest.fixture
def noninferiority():
    """docs/your-method.md's example kind, registered from the page's own block."""
    (code,) = [c for lang, intro, c in fenced_blocks(ROOT / "docs" / "your-method.md")
               if lang == "python" and "class NonInferiority" in c]
    module = types.ModuleType("lmpo.experiments.stats.kinds.noninferiority")
    sys.modules[module.__name__] = module
    try:
        exec(compile(code, "noninferiority.py", "exec"), module.__dict__)
        claim_kind.cache_clear()
        yield claim_kind("noninferiority")
    finally:
        CLAIM_KINDS._entries.pop("noninferiority", None)
        CLAIM_KINDS._meta.pop("noninferiority", None)
        sys.modules.pop(module.__name__, None)
        claim_kind.cache_clear()


def test_a_new_kind_is_one_module_and_judged_like_the_others(noninferiority):
    claim = {"kind": "noninferiority", "metric": "eval/accuracy_trained", "arms": ["a", "b"],
             "margin": 0.02, "sentence": "no worse than the clip"}
    check_claim(claim, ARMS, "claims[0]")
    assert describe_claim(claim) == "eval/accuracy_trained: a - b >= -0.02"
    with pytest.raises(ConfigError, match="a noninferiority claim needs"):
        check_claim({k: v for k, v in claim.items() if k != "margin"}, ARMS, "claims[0]")
    b = np.array([0.50, 0.55, 0.60, 0.52, 0.58])
    close = judge(claim, b + np.array([0.001, -0.002, 0.0, 0.002, -0.001]), b)
    assert close["verdict"] == "holds" and close["ci_holm"][0] > -0.02
    assert close["holm_level"] == pytest.approx(0.9)
    worse = judge(claim, b - 0.1 + np.array([0.001, -0.002, 0.0, 0.002, -0.001]), b)
    assert worse["verdict"] == "contradicted"
    noisy = judge(claim, b + np.array([0.05, -0.06, 0.04, -0.05, 0.02]), b)
    assert noisy["verdict"] == "underpowered" and noisy["first"] == "not shown"
    assert noisy["mde"] > 0.02  # its power is held against the margin
    assert how_tested({"kind": "noninferiority", "claim": "m: a - b >= -0.02"} | close) \
        .startswith("one-sided p ")
