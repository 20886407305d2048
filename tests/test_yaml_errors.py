"""Malformed YAML is one line naming the file, the line and the column, with exit 2: a
syntax error, a duplicate key (never the last value silently kept), a binary or an empty
file, a bad override value, in train configs, experiment files and a saved run's files."""

from __future__ import annotations

import pytest
import yaml

from lmpo.cli import main
from lmpo.config import load_config
from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import load_experiment
from lmpo.trainer.resume import load_run_config
from lmpo.trainer.train_config import TrainConfig
from lmpo.yamlfile import parse_yaml

BAD = {"duplicate.yaml": ("steps: 3\nsteps: 500\n", r":2:1: duplicate key 'steps' \(first at "
                                                     r"line 1\)"),
       "syntax.yaml": ("steps: [1\n", r":2:1: expected ',' or ']'"),
       "binary.yaml": ("\0\x01binary", r": not a YAML .* \(it holds binary data\)"),
       "empty.yaml": ("# only a comment\n", r": the .* is empty"),
       "nested.yaml": ("optim:\n  lr: 1\n  lr: 2\n", r":3:3: duplicate key 'lr'")}


@pytest.mark.parametrize("name", BAD)
def test_a_malformed_train_config_is_one_line_naming_file_and_line(name, tmp_path):
    text, msg = BAD[name]
    path = tmp_path / name
    path.write_bytes(text.encode())
    with pytest.raises(ConfigError, match=rf"^{path}{msg}") as err:
        load_config(TrainConfig, str(path))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", BAD)
def test_a_malformed_experiment_file_is_one_line_too(name, tmp_path):
    text, msg = BAD[name]
    path = tmp_path / name
    path.write_bytes(text.encode())
    with pytest.raises(ConfigError, match=rf"^{path}{msg}"):
        load_experiment(path)


def test_a_second_arms_block_is_refused_not_merged(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("steps: 1\ndiffers_in: []\narms:\n  a: {preset: grpo}\n"
                    "arms:\n  b: {preset: grpo}\n")
    with pytest.raises(ConfigError, match=r":5:1: duplicate key 'arms' \(first at line 3\)"):
        load_experiment(path)


def test_a_bad_override_value_and_a_damaged_saved_config(tmp_path, capsys):
    with pytest.raises(ConfigError, match=r"override 'optim.lr=\[1':1:3: expected"):
        load_config(TrainConfig, "grpo", ["optim.lr=[1"])
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump({"steps": 3}) + "steps: 4\n")
    with pytest.raises(ConfigError, match=rf"^{saved}:2:1: duplicate key 'steps'"):
        load_run_config(saved)
    assert main(["train", "--config", "grpo", "--run-dir", str(tmp_path / "r"),
                 "optim.lr=[1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "optim.lr=[1" in err
    assert not (tmp_path / "r").exists()  # nothing written


def test_valid_yaml_reads_as_before():
    assert parse_yaml("a: 1\nb: {c: [1, 2]}\n", "x") == {"a": 1, "b": {"c": [1, 2]}}
    assert parse_yaml("- {a: 1}\n- {a: 2}\n", "x") == [{"a": 1}, {"a": 2}]  # same key, two maps
