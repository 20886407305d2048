"""Config loading and a short supervised warm start that must learn."""

from __future__ import annotations

import json

import pytest

from lmpo.cli import main
from lmpo.config import ConfigError, load_config
from lmpo.sft import SFTConfig


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task: products\nsteps: 10\nlr: 1\n")
    cfg = load_config(SFTConfig, path, ["batch_size=8", "lr=2e-3"])
    assert (cfg.task, cfg.steps, cfg.batch_size, cfg.lr) == ("products", 10, 8, 2e-3)
    assert isinstance(cfg.lr, float)


def test_hydras_add_prefixes_read_as_plain_overrides():
    """`+key=value` and `++key=value` set the key as `key=value` does, for a schema field
    and for a new key of a free-form mapping (a loss's hyper-parameters)."""
    from lmpo.trainer.train_config import TrainConfig

    assert load_config(SFTConfig, None, ["+steps=7", "++lr=2e-3"]) == \
        load_config(SFTConfig, None, ["steps=7", "lr=2e-3"])
    plus = load_config(TrainConfig, "grpo", ["+loss.hparams.eps_high=0.28"])
    assert plus == load_config(TrainConfig, "grpo", ["loss.hparams.eps_high=0.28"])
    assert plus.loss.hparams["eps_high"] == 0.28


@pytest.mark.parametrize("override,msg", [
    ("stpes=3", "unknown config key 'stpes' \\(did you mean 'steps'\\?\\)"),
    ("steps=many", "steps: expected int"),
    ("steps=true", "steps: expected int, got True"),  # a bool is not a count
    ("lr=-1", "lr must be > 0"),
    ("steps", "must look like key=value"),
    ("+stpes=3", "unknown config key 'stpes'"),  # Hydra's add checks the path too
    ("~steps", "no key deletion"),
    ("device=gpu", "device 'gpu': expected one of auto, cpu, cuda"),
])
def test_bad_config_fails_clearly(override, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(SFTConfig, None, [override])


def test_unknown_yaml_key_names_nearest(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("batchsize: 3\n")
    with pytest.raises(ConfigError, match="did you mean 'batch_size'"):
        load_config(SFTConfig, path)


def test_cli_reports_config_errors(capsys):
    assert main(["sft", "learning_rate=1"]) == 2
    assert "did you mean 'lr'" in capsys.readouterr().err


def test_short_sft_lowers_loss_and_learns_the_easiest_tier(sft_run):
    """The `nano-chain-sum` warm start (the `sft_run` fixture: 800 steps). Its loss falls
    below a quarter of its start and greedy exact accuracy on the held-out t2d1 reaches
    0.8 (random init: 0 everywhere); t2d1 holds out 50 of its 200 problems (capped: a
    quarter of a tier that has fewer distinct problems than eval_per_tier asks)."""
    out, summary = sft_run
    assert summary["loss_last"] < 0.25 * summary["loss_first"]
    assert summary["eval"]["per_tier"]["t2d1"]["accuracy"] >= 0.8
    assert summary["heldout"]["t2d1"] == {"distinct": 200, "exact": True, "heldout": 50,
                                          "capped": True}
    saved = json.loads((out / "eval.json").read_text())
    assert saved["eval"]["per_tier"] == summary["eval"]["per_tier"]
    assert (out / "config.json").exists()
