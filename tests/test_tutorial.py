"""docs/tutorial.md, followed as written in a fresh folder: its files (the reward function,
the experiment) exactly as the page shows them, its commands line by line, on stand-ins for
the user's model (a randomly initialised tiny Llama folder) and data (40-line JSONL files,
with and without clusters, of the page's schema). The 10-minute version runs as written;
the one change: the 5-seed comparison runs 2 steps per run instead of the file's 200, two
runs at a time (`--steps 2 --jobs 2` appended), since the stand-in model learns nothing in
any number of steps; what is checked is that every command, file and setting works and
that the report labels both claims over 5 seeds."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from lmpo.cli import main
from lmpo.tasks.jsonl import load_jsonl
from tests.doc_blocks import fenced_blocks

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "tutorial.md"
SHORTENED = {"lmpo compare --config mine.yaml --out runs/mine": ["--steps", "2", "--jobs", "2"]}


def blocks() -> list[tuple[str, str, str]]:
    """(language, the file its paragraph names last or "", text) of every fenced block."""
    out = []
    for lang, intro, code in fenced_blocks(PAGE):
        named = re.findall(r"`([\w./-]+\.(?:py|yaml|jsonl))`", intro)
        out.append((lang, named[-1] if named else "", code))
    return out


def files() -> dict[str, str]:
    return {name: code for lang, name, code in blocks() if name and lang in ("python", "yaml")}


def commands() -> list[str]:
    return [line.strip() for lang, _, code in blocks() if lang == "bash"
            for line in code.splitlines() if line.strip() and not line.startswith("#")]


def test_the_page_names_its_files_and_commands():
    assert sorted(files()) == ["mine.yaml", "reward.py", "smoke.yaml"]
    assert [c.split()[:2] for c in commands()] == [["lmpo", "eval"], ["lmpo", "eval"],
                                                  ["lmpo", "compare"], ["lmpo", "report"],
                                                  ["lmpo", "compare"], ["lmpo", "report"]]
    assert set(SHORTENED) <= set(commands())


def test_the_pages_example_lines_read_as_data(tmp_path):
    for lang, name, text in blocks():
        if lang == "jsonl":
            (tmp_path / Path(name).name).write_text(text)
            problems = load_jsonl(tmp_path / Path(name).name)
            assert len(problems) == 2 and all(p.answer for p in problems)


def stand_in_data(folder: Path) -> None:
    """40 sums without clusters (train.jsonl), 20 + 20 in two clusters (tiered.jsonl)."""
    (folder / "data").mkdir()
    plain = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(8) for b in range(5)]
    tiered = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "cluster": "easy"}
              for a in range(4) for b in range(5)]
    tiered += [{"prompt": f"{a}+{b}-{c}=", "answer": str(a + b - c), "cluster": "hard"}
               for a in range(4) for b in range(5) for c in (1,)]
    for name, rows in (("train", plain), ("tiered", tiered)):
        (folder / "data" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.slow  # ten runs
def test_the_tutorial_runs_as_written(tiny_policy_dir, tmp_path, monkeypatch, capsys):
    """Each command's arguments go to the `lmpo` entry point in this process (the
    comparison's runs are processes of their own, as always)."""
    shutil.copytree(tiny_policy_dir, tmp_path / "models" / "my-model")
    stand_in_data(tmp_path)
    for name, code in files().items():
        (tmp_path / name).write_text(code)
    monkeypatch.chdir(tmp_path)
    outputs = []
    for command in commands():
        argv = shlex.split(command)
        assert argv[0] == "lmpo", command
        code = main([*argv[1:], *SHORTENED.get(command, [])])
        out, err = capsys.readouterr()
        assert code == 0, f"{command}\n{out[-2000:]}\n{err[-2000:]}"
        outputs.append(out)
    # the evaluations show the held-out split: a quarter of each cluster's distinct prompts
    assert "default: 40 distinct, 10 held out" in outputs[0]
    assert "easy: 20 distinct, 5 held out" in outputs[1]
    assert "hard: 20 distinct, 5 held out" in outputs[1]
    runs = sorted(p.parent.relative_to(tmp_path / "runs/mine/runs").as_posix()
                  for p in (tmp_path / "runs/mine/runs").glob("*/seed*/metrics.jsonl"))
    assert runs == [f"{arm}/seed{k}" for arm in ("cegppo", "grpo") for k in range(5)]
    config = (tmp_path / "runs/mine/runs/cegppo/seed0/config.yaml").read_text()
    assert "policy: models/my-model" in config and "fn: reward.py:score" in config
    # the smoke run: mine.yaml's arms and claims at its own size, as written
    smoke = sorted(p.parent.relative_to(tmp_path / "runs/smoke/runs").as_posix()
                   for p in (tmp_path / "runs/smoke/runs").glob("*/seed*/metrics.jsonl"))
    assert smoke == [f"{arm}/seed{k}" for arm in ("cegppo", "grpo") for k in range(2)]
    run = tmp_path / "runs/smoke/runs/grpo/seed1"
    assert "batch_size: 8" in (run / "config.yaml").read_text()
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 5
    smoke_claims = json.loads((tmp_path / "runs/smoke/report.json").read_text())["claims"]
    assert [c["verdict"] for c in smoke_claims] == ["insufficient seeds"] * 2  # as the page says
    claims = json.loads((tmp_path / "runs/mine/report.json").read_text())["claims"]
    assert [c["n"] for c in claims] == [5, 5]
    assert all(c["verdict"] and c["verdict"] != "insufficient seeds" for c in claims)
    report = (tmp_path / "runs/mine/report.md").read_text()
    assert "CE-GPPO ends more accurate than GRPO on my held-out problems" in report
