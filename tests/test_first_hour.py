"""What a new user meets in the first hour: commands print only lmpo's own output, a
mistyped option says how overrides are written, and a stopped run loses no step."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import cellpylib

SRC = Path(__file__).resolve().parents[1] / "src"


def test_no_dependency_warning_reaches_the_terminal(tmp_path):
    """cellpylib (under reasoning-gym) compiles with SyntaxWarnings where no bytecode is
    cached; a copy without bytecode first on the path recompiles it on import."""
    fresh = tmp_path / "site"
    shutil.copytree(Path(cellpylib.__file__).parent, fresh / "cellpylib",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = os.environ | {"PYTHONPATH": f"{fresh}{os.pathsep}{SRC}", "PYTHONDONTWRITEBYTECODE": "1"}
    probe = subprocess.run([sys.executable, "-c", "import cellpylib"], env=env,
                           capture_output=True, text=True, check=True)
    assert "SyntaxWarning" in probe.stderr  # the dependency's own warnings, when imported bare
    check = f"import lmpo.tasks, cellpylib; assert cellpylib.__file__.startswith({str(fresh)!r})"
    done = subprocess.run([sys.executable, "-c", check],
                          env=env, capture_output=True, text=True, check=True)
    assert done.stderr == ""


def test_an_option_spelt_as_a_config_key_says_how_overrides_are_written(capsys):
    import pytest

    from lmpo.cli import main

    run = ["train", "--config", "grpo", "--run-dir", "r"]
    for argv, hint in (([*run, "--optim.lr=3e-5"], "optim.lr=3e-5"),
                       ([*run, "--optim.lr", "1e-4"], "optim.lr=1e-4")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert f"key=value, without dashes: {hint}" in err, err
