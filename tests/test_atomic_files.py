"""Bookkeeping files are written whole or not at all, under kill -9 at random points; a
damaged sweep.json is kept aside; a read-only or file-shaped target is one line."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from lmpo.cli import main
from lmpo.experiments.run.dispatch import read_history

WRITER = """
import sys
from lmpo.atomic import write_text
path, i = sys.argv[1], 0
print("ready", flush=True)
while True:
    i += 1
    write_text(path, (str(i % 2) * 200_000) + "\\n")
"""


def test_a_writer_killed_at_random_points_leaves_the_old_file_or_the_new_one(tmp_path):
    target = tmp_path / "sweep.json"
    target.write_text("0" * 200_000 + "\n")
    rng = random.Random(0)
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)],
                                stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        text = target.read_text()
        assert text in ("0" * 200_000 + "\n", "1" * 200_000 + "\n"), len(text)
    leftovers = [p.name for p in tmp_path.iterdir() if p.name != "sweep.json"]
    assert all(p.endswith(".tmp") for p in leftovers)  # a killed writer's own, never read


def test_a_damaged_sweep_history_is_kept_aside_and_restarted(tmp_path, capsys):
    history = tmp_path / "sweep.json"
    history.write_text('[{"started": 1, "wall_s"')  # cut short
    assert read_history(history) == []
    assert (tmp_path / "sweep.json.damaged").read_text() == '[{"started": 1, "wall_s"'
    assert "kept it as" in capsys.readouterr().err
    history.write_text(json.dumps([{"started": 1}]))
    assert read_history(history) == [{"started": 1}]


@pytest.mark.parametrize("command", [
    ["train", "--config", "grpo", "--run-dir", "{target}/run", "steps=1"],
    ["compare", "--config", "demo", "--out", "{target}/sweep", "--list"],
])
@pytest.mark.parametrize("code,why", [(errno.EROFS, "not writable here"),
                                      (errno.EACCES, "not writable here")])
def test_a_read_only_target_is_one_line(tmp_path, capsys, monkeypatch, command, code, why):
    """(Simulated: the tests may run as root, whom permissions do not stop.)"""
    target = tmp_path / "ro"
    target.mkdir()
    real_mkdir = os.mkdir

    def mkdir(path, *args, **kwargs):
        if str(path).startswith(str(target)):
            raise OSError(code, os.strerror(code), str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", mkdir)
    assert main([x.format(target=target) for x in command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and why in err and str(target) in err, err
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("command", [
    ["train", "--config", "grpo", "--run-dir", "{file}", "steps=1"],
    ["compare", "--config", "demo", "--out", "{file}/sweep", "--list"],
])
def test_a_file_shaped_target_is_one_line(tmp_path, capsys, command):
    file = tmp_path / "a_file"
    file.write_text("mine\n")
    assert main([x.format(file=file) for x in command]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "a file where a directory is needed" in err, err
    assert file.read_text() == "mine\n"
