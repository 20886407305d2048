"""Hostile names and values: experiment, arm and level names must be safe path components
(refused in one line before anything is written), and every word of a printed verl
command is quoted, so running it in a shell runs the intended program and nothing else."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from lmpo.cli import main
from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import parse_experiment
from lmpo.experiments.engines.verl_launch import shell_word

HOSTILE = ["../../x", "/abs/path", "a/b", "a@b", "x$(touch pwned)", "x`touch pwned`",
           "x'y", 'x"y', "a b", "x\ny", "x\0y", ".hidden", "-flag", "x" * 101, ""]


def experiment(arms: dict, **extra) -> dict:
    return {"arms": arms, "steps": 1, "differs_in": ["loss"], **extra}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_arm_or_level_name_is_refused_in_one_line(name):
    for data in (experiment({name: {"preset": "grpo"}}),
                 experiment({"a": {"preset": "grpo"}}, conditions={
                     "axis": "x", "levels": {name: {"dose": 0}}}),
                 experiment({"a": {"preset": "grpo"}}, name=name)):
        with pytest.raises(ConfigError) as err:
            parse_experiment(data, "x", "exp.yaml")
        assert "is not a safe name" in str(err.value) and "\n" not in str(err.value).strip(
            "\n") or "\n" in name


def test_every_committed_name_is_safe():
    from pathlib import Path

    from lmpo.experiments.design.spec import load_experiment

    for path in sorted(Path("experiments").glob("*.yaml")) + sorted(
            Path("experiments/pilots").glob("*.yaml")):
        load_experiment(path)  # refuses an unsafe experiment, arm or level name


@pytest.mark.parametrize("value", ["x$(touch pwned)", "x`touch pwned`", "it's", 'say "hi"',
                                   "a b", "semi;colon", "new\nline", "$HOME", "*"])
def test_a_printed_word_reaches_the_program_literally(value, tmp_path):
    """Run the word in a real shell as an argument of printf: exactly the value comes out
    and no command inside it ran; the resource placeholders still expand."""
    word = shell_word(f"trainer.experiment_name={value}")
    out = subprocess.run(["bash", "-c", f"printf '%s' {word}"], cwd=tmp_path,
                         capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert out.stdout == f"trainer.experiment_name={value}"
    assert not (tmp_path / "pwned").exists()
    expanded = subprocess.run(["bash", "-c", f"printf '%s' {shell_word('p=$DATA/k x/t')}"],
                              capture_output=True, text=True,
                              env={"PATH": "/usr/bin:/bin", "DATA": "/d"})
    assert expanded.stdout == "p=/d/k x/t"


def test_the_printed_verl_commands_run_only_the_entrypoint(tmp_path, capsys, tiny_policy_dir):
    """A task path with shell characters reaches every printed command as data: running
    the printed lines with `printf` as verl's entrypoint creates no file."""
    task = tmp_path / "t$(touch pwned)'x.jsonl"
    task.write_text('{"task": "chain_sum", "prompt": "1 + 1 =", "answer": "2"}\n')
    path = tmp_path / "exp.yaml"
    base = {"task": str(task), "policy": str(tiny_policy_dir), "rollout": {
        "clusters": None, "max_new_tokens": 8}, "log": {"eval_max_new_tokens": 8}}
    path.write_text(yaml.safe_dump(experiment({"grpo": {"preset": "grpo"}}, base=base)))
    assert main(["compare", "--config", str(path), "--engine", "verl",
                 "--verl-entrypoint", "printf %s"]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("printf")
             or " printf " in x]
    assert lines
    for line in lines:
        subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True,
                       env={"PATH": "/usr/bin:/bin", "DATA": str(tmp_path)})
    assert not (tmp_path / "pwned").exists()
