"""lmpo as people install it: presets by name from any directory, `lmpo presets`,
warm-start policies built once into a user cache, `python -m lmpo --version`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmpo import presets
from lmpo.cli import main
from lmpo.config import ConfigError, load_config, read_yaml
from lmpo.sft import SFTConfig
from lmpo.trainer.train_config import TrainConfig
from lmpo.warmstart import cache_entry, resolve_policy

TINY_SFT = ("steps=20", "eval_per_tier=2", "max_new_tokens=4")


def test_configs_resolve_by_name_or_file_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing of the repository around
    cfg = load_config(TrainConfig, "cegppo")
    assert cfg.loss.name == "cegppo" and cfg.rollout.clusters == ["t3d1"]  # via extends: base
    assert load_config(SFTConfig, "nano-chain-sum").steps == 800
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: cegppo\nloss: {hparams: {beta2: 2.0}}\n")  # a shipped preset
    cfg = load_config(TrainConfig, str(mine))
    assert cfg.loss.hparams["beta2"] == 2.0 and cfg.loss.hparams["beta1"] == 0.5
    with pytest.raises(ConfigError, match="unknown train preset 'cegpo' \\(did you mean "
                                          "'cegppo'\\?\\); train presets: base, base_ac"):
        load_config(TrainConfig, "cegpo")
    with pytest.raises(ConfigError, match="config file nowhere.yaml does not exist"):
        load_config(TrainConfig, "nowhere.yaml")
    with pytest.raises(ConfigError, match="unknown sft preset 'grpo'"):  # separate namespaces
        load_config(SFTConfig, "grpo")


def test_namespaces_are_separate_and_every_preset_has_a_description():
    for kind in presets.FOLDERS:
        for name, text in presets.list_presets(kind):
            assert text and len(text) < 120, (kind, name, text)
    assert set(presets.names("train")) >= {"grpo", "base", "espo", "demo"}
    assert presets.names("sft") == ["nano-chain-sum", "nano-chain-sum-long", "nano-chain-sum-steps"]
    assert presets.names("rm") == ["nano-chain-sum-rm"]
    assert read_yaml("base", "train")["policy"] == "nano-chain-sum"


def test_lmpo_presets_lists_them_with_descriptions(capsys):
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    for s in ("train (lmpo train)", "cegppo", "CE-GPPO: gradient-preserving clipping",
              "sft (lmpo sft / policy:)", "nano-chain-sum", "experiment (lmpo compare)",
              "rm (lmpo rm / reward.model:)", "nano-chain-sum-rm"):
        assert s in out, s


def test_python_m_lmpo_is_the_command_and_version_names_the_stack():
    out = subprocess.run([sys.executable, "-m", "lmpo", "--version"], capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("lmpo 0.") and "torch 2.13.0" in out and "transformers " in out
    assert "verl " in out and "trl " in out


def test_a_policy_path_is_a_folder_and_a_name_is_a_warm_start(tiny_policy_dir, tmp_path):
    assert resolve_policy(str(tiny_policy_dir)) == tiny_policy_dir
    for bad in (str(tmp_path / "nothing"), "nano-chain-som", "./nano-chain-sum"):
        with pytest.raises(ConfigError, match="neither a Hugging Face model folder"):
            resolve_policy(bad)


def test_concurrent_first_uses_build_the_cache_entry_once(tmp_path, monkeypatch):
    """Two processes ask for the same warm start at once: one builds it under the lock
    (into a temporary folder, renamed into place), the other waits and reuses it."""
    env = os.environ | {"LMPO_HOME": str(tmp_path / "home")}
    code = ("from lmpo.warmstart import cached_policy; "
            f"print('PATH', cached_policy('nano-chain-sum', progress=False, "
            f"sft_overrides={TINY_SFT!r}, max_threads=1))")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum(o.count("building the warm-start policy 'nano-chain-sum'") for o in outs) == 1
    assert sum(o.count("SFT steps on 1 thread;") for o in outs) == 1  # capped by the caller
    paths = {line.split(" ", 1)[1] for o in outs for line in o.splitlines()
             if line.startswith("PATH ")}
    entry = Path(paths.pop())
    assert not paths and entry.name.startswith("nano-chain-sum-")
    assert (entry / "config.json").is_file() and (entry / "model.safetensors").is_file()
    leftovers = [p.name for p in entry.parent.iterdir() if p.is_dir() and p != entry]
    assert leftovers == []  # no half-written folder left behind
    monkeypatch.setenv("LMPO_HOME", str(tmp_path / "home"))
    assert cache_entry("nano-chain-sum") == entry
    assert resolve_policy("nano-chain-sum") == entry  # reused: no second build


def test_lmpo_train_caps_the_warm_start_builds_threads(monkeypatch, tmp_path):
    from lmpo.config import load_config
    from lmpo.trainer import setup
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    asked = {}

    def resolve(spec, **kwargs):
        asked.update(kwargs, spec=spec)
        raise KeyboardInterrupt  # stop before any work

    monkeypatch.setattr(setup, "resolve_policy", resolve)
    with pytest.raises(KeyboardInterrupt):
        train(load_config(TrainConfig, "grpo", ["threads=1"]), tmp_path / "run", progress=False)
    assert asked["spec"] == "nano-chain-sum" and asked["max_threads"] == 1


MY_LOSS = '''
import torch

from lmpo.losses.base import prepare, ratio_metrics
from lmpo.losses.registry import LOSSES


@LOSSES.register("capped_pg", default_agg="token-mean")
def capped_pg(logp, old_logp, adv, mask, *, cap=2.0):
    """-A * min(r, cap) * logp with the weight detached (CISPO-like, one-sided)."""
    x = prepare(logp, old_logp, adv, mask)
    weight = x.ratio.clamp(max=cap).detach()
    metrics = ratio_metrics(x) | {"capped_frac": x.mean((x.ratio > cap).to(x.logp.dtype))}
    return x.zero_off_mask(-x.adv * weight * x.logp), metrics
'''


def test_your_own_method_is_one_file_one_registry_line_and_one_preset(tiny_policy_dir,
                                                                      tmp_path):
    """The README's walkthrough, in a fresh process (the registry is global)."""
    (tmp_path / "my_loss.py").write_text(MY_LOSS)
    (tmp_path / "capped.yaml").write_text(
        "# My method: a capped, stop-gradient importance weight\nextends: grpo\n"
        "imports: [my_loss.py]\nloss: {name: capped_pg, hparams: {cap: 1.5}}\n")
    run = subprocess.run(
        [sys.executable, "-m", "lmpo", "train", "--config", "capped.yaml", "--run-dir", "r",
         "--quiet", "--steps", "1", f"policy={tiny_policy_dir}", "rollout.batch_size=16",
         "log.eval_per_tier=2", "log.tensorboard=false"],
        cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    row = __import__("json").loads((tmp_path / "r" / "metrics.jsonl").read_text())
    assert "loss/capped_frac" in row and row["train/updates"] >= 1
    bad = subprocess.run(
        [sys.executable, "-m", "lmpo", "train", "--config", "capped.yaml", "--run-dir", "x",
         "imports=[nowhere.py]"], cwd=tmp_path, capture_output=True, text=True)
    assert bad.returncode == 2 and "imports: 'nowhere.py' failed" in bad.stderr


def test_a_command_whose_extra_is_missing_names_the_extra(monkeypatch, capsys):
    """The package alone is torch and numpy: a command that needs the training extra says
    so in one line (exit 2), naming the module and the pip line."""
    from lmpo.cli import main

    monkeypatch.setitem(sys.modules, "rich", None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, "rich.console", raising=False)
    assert main(["presets"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("lmpo presets: error: rich is not installed: this command needs the train "
                   "extra (pip install 'lmpo[train]')")
