"""docs/running.md's table of bad inputs, checked row by row: each row's command runs (in a
folder holding the files below) and must print one line holding the row's message, exit
with the row's code, and leave nothing behind."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from lmpo.cli import main

DOC = Path(__file__).resolve().parents[1] / "docs" / "running.md"
FILES = {  # the files the table's commands name
    "syntax.yaml": "# a train config\nsteps: [3\n",
    "dup.yaml": "# a train config\nsteps: 3\nseed: 1\nsteps: 500\n",
    "binary.yaml": b"\x89PNG\r\n\x1a\n\x00\x00",
    "empty.yaml": "",
    "exp_path.yaml": "# x\narms: {'../x': {preset: grpo}}\nsteps: 2\ndiffers_in: []\n",
    "exp_preset.yaml": "# x\narms: {a: {preset: grpo}, b: {preset: grpoo}}\nsteps: 2\n"
                       "differs_in: [loss]\n",
    "exp_metric.yaml": "# x\narms: {a: {preset: grpo}, b: {preset: cegppo}}\nsteps: 2\n"
                       "differs_in: [loss]\nclaims: [{kind: direction, metric: "
                       "eval/acuracy_trained, arms: [a, b], expect: greater, sentence: s}]\n",
    "exp_policy.yaml": "# x\nbase: {policy: nano-chain-summ}\narms: {a: {preset: grpo}, "
                       "b: {preset: cegppo}}\nsteps: 2\ndiffers_in: [loss]\n",
    "exp_folder.yaml": "# x\nbase: {policy: broken_model}\narms: {a: {preset: grpo}, "
                       "b: {preset: cegppo}}\nsteps: 2\ndiffers_in: [loss]\n",
    "broken_model/config.json": "{\"model_type\": ",
    "exits.py": "import sys\nsys.exit(1)\ndef reward(p, c, a, **m):\n    return [0.0] * len(c)\n",
    "a_file": "not a directory\n",
}


def rows() -> list[tuple[str, str, str, int]]:
    """(input, command, message, exit code) of each row of the table."""
    text = DOC.read_text()
    table = text.split("## Bad input", 1)[1].split("\n## ", 1)[0]
    found = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[1].startswith("`lmpo "):
            found.append((cells[0], cells[1].strip("`"), cells[2].strip("`"), int(cells[3])))
    return found


def test_the_table_is_there_and_covers_each_kind_of_file():
    assert len(rows()) >= 15
    commands = " ".join(r[1] for r in rows())
    assert all(name in commands for name in FILES if "/" not in name)


@pytest.mark.parametrize("what,command,message,code", rows(), ids=[r[0] for r in rows()])
def test_each_bad_input_is_one_line_with_its_exit_code(tmp_path, monkeypatch, capsys, what,
                                                       command, message, code):
    for name, content in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(shlex.split(command)[1:]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert re.search(re.escape(message), err), (message, err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written
