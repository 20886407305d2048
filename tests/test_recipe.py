"""docs/your-method.md's recipe, followed literally in a copy of the repository: the files
it names and nothing else, then the methods page regenerated, and the registry, reference,
preset, architecture and methods-page tests pass there, the new ones included."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]


def recipe_files() -> dict[str, str]:
    """{path: code} for every fenced block of the section whose introducing line names a
    path inside the repository (src/... or tests/...)."""
    files = {}
    for lang, intro, code in fenced_blocks(ROOT / "docs" / "your-method.md"):
        named = re.findall(r"`((?:src|tests)/[^`]+)`", intro)
        if named and lang in ("python", "yaml"):
            files[named[-1]] = code
    return files


def test_the_recipe_names_a_loss_a_controller_and_an_estimator_and_nothing_else():
    assert sorted(recipe_files()) == [
        "src/lmpo/advantages/group_median.py", "src/lmpo/losses/capped_pg.py",
        "src/lmpo/presets/train/capped_pg.yaml", "src/lmpo/presets/train/group_median.yaml",
        "src/lmpo/presets/train/length_cap.yaml", "src/lmpo/rollout/controllers/length_cap.py",
        "tests/advantage_references/group_median.py", "tests/loss_references/capped_pg.py",
        "tests/test_length_cap.py"]


def test_following_the_recipe_in_a_copy_passes_the_tests(tmp_path):
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".venv*", "runs", "results")
    for part in ("src", "tests", "experiments", "docs", "benchmarks"):
        shutil.copytree(ROOT / part, copy / part, ignore=ignore)
    for name in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / name, copy / name)
    for path, code in recipe_files().items():
        assert not (copy / path).exists(), path
        (copy / path).write_text(code)
    env = os.environ | {"PYTHONPATH": f"{copy / 'src'}{os.pathsep}{copy}"}
    methods = subprocess.run([sys.executable, "-m", "lmpo", "methods", "--readme",
                              "docs/methods-reference.md"], cwd=copy, env=env, capture_output=True,
                             text=True)
    assert methods.returncode == 0, methods.stderr[-2000:]
    page = (copy / "docs" / "methods-reference.md").read_text()
    assert "capped_pg" in page and "group_median" in page
    tests = ["tests/test_losses_reference.py", "tests/test_loss_registry.py",
             "tests/test_presets.py", "tests/test_architecture.py", "tests/test_methods.py",
             "tests/test_length_cap.py", "tests/test_trainer.py", "tests/test_domains.py",
             "tests/test_advantage_references.py", "tests/test_advantages_group.py"]
    select = "capped_pg or length_cap or group_median or every_registered or methods or " \
             "names_no or cycle or upward or every_hyper_parameter or nan_free"
    run = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-k",
                          select, *tests], cwd=copy, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    passed = set(re.findall(r"^(\S+) PASSED", run.stdout, re.M))
    for test in ("test_trainer.py::test_every_preset_loads_builds_and_runs_one_step[capped_pg]",
                 "test_trainer.py::test_every_preset_loads_builds_and_runs_one_step[length_cap]",
                 "test_losses_reference.py::test_every_registered_loss_has_a_reference",
                 "test_loss_registry.py::test_a_loss_reports_what_its_metadata_declares"
                 "[capped_pg]",
                 "test_presets.py::test_a_method_preset_differs_from_its_base_only_in_its_method"
                 "[length_cap]",
                 "test_methods.py::test_the_methods_table_is_current",
                 "test_length_cap.py::test_the_cap_stops_at_k_and_halves_when_accuracy_is_high",
                 "test_trainer.py::test_every_preset_loads_builds_and_runs_one_step"
                 "[group_median]",
                 "test_presets.py::test_a_method_preset_differs_from_its_base_only_in_its_method"
                 "[group_median]",
                 "test_domains.py::test_every_hyper_parameter_of_every_part_has_a_domain",
                 "test_domains.py::test_every_default_lies_in_its_domain[loss-capped_pg-cap]",
                 "test_advantage_references.py::test_every_registered_estimator_has_a_reference",
                 "test_advantages_group.py::test_random_layouts_and_constant_scores_are_nan_free"):
        assert f"tests/{test}" in passed, test
    assert sum("capped_pg-" in t for t in passed) >= 6  # its reference at both cases, 3 seeds
    assert sum("group_median" in t and "equals_its_reference" in t for t in passed) == 8
    found = subprocess.run([sys.executable, "-c", "import lmpo; print(lmpo.__file__)"], cwd=copy,
                           env=env, capture_output=True, text=True).stdout
    assert str(copy) in found  # the copy's code ran, not the installed one
