"""lmpo next to an engine: in verl's environment (make test-verl) and TRL's (make
test-trl), lmpo's torch range admits every torch the engine asks for, and installing lmpo
there changes no package already installed (pip's dry run). In the core environment, with
neither engine installed, both skip with the make target that runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
ENGINES = {"verl": "make test-verl", "trl": "make test-trl"}


def engine(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        pytest.skip(f"{name} not installed: run `{ENGINES[name]}`")


def torch_range():
    return next(Requirement(r) for r in requires("lmpo")
                if Requirement(r).name == "torch" and "extra ==" not in r).specifier


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_lmpos_torch_range_admits_the_engines_torch(name):
    engine(name)
    spec = torch_range()
    asked = [Requirement(r) for r in requires(name) or () if Requirement(r).name == "torch"]
    pins = [s.version for r in asked for s in r.specifier if s.operator == "=="]
    for pin in pins:  # e.g. verl's GPU extras: torch==2.11.0
        assert spec.contains(pin, prereleases=True), (name, pin, str(spec))
    assert spec.contains(version("torch"), prereleases=True), (version("torch"), str(spec))
    print(f"{name} {version(name)}: torch asked {[str(r.specifier) for r in asked]}, "
          f"lmpo's range {spec}")


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_installing_lmpo_changes_no_package_of_the_engines_environment(name, tmp_path):
    engine(name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--report",
         str(tmp_path / "report.json"), str(ROOT)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    changed = sorted(item["metadata"]["name"] for item in report["install"])
    assert changed == ["lmpo"], changed
