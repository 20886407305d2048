"""lmpo as people install it: presets by name from any directory, `lmpo presets`,
warm-start policies built once into a user cache, `python -m lmpo --version`."""

from __future__ import annotations

import json
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
    both = subprocess.run([sys.executable, "-m", "lmpo", "--version", "train", "--help"],
                          capture_output=True, text=True, check=True).stdout
    assert both == out  # argparse's version action: it prints and exits before the rest


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
            f"sft_overrides={TINY_SFT!r}))")
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum(o.count("building the warm-start policy 'nano-chain-sum'") for o in outs) == 1
    assert sum(o.count("SFT steps on 2 threads;") for o in outs) == 1  # the preset's threads
    paths = {line.split(" ", 1)[1] for o in outs for line in o.splitlines()
             if line.startswith("PATH ")}
    entry = Path(paths.pop())
    assert not paths and entry.name.startswith("nano-chain-sum-")
    assert (entry / "config.json").is_file() and (entry / "model.safetensors").is_file()
    leftovers = [p.name for p in entry.parent.iterdir() if p.is_dir() and p != entry]
    assert leftovers == []  # no half-written folder left behind
    monkeypatch.setenv("LMPO_HOME", str(tmp_path / "home"))
    assert cache_entry("nano-chain-sum", TINY_SFT)[0] == entry
    assert resolve_policy("nano-chain-sum", sft_overrides=TINY_SFT) == entry  # reused


def test_a_cache_entry_is_keyed_by_what_builds_it_and_checked_on_load(tmp_path, monkeypatch,
                                                                      capsys):
    """A changed builder parameter or builder source is a new entry (never the old one
    served); a changed file in an entry is found on load, the entry kept aside and built
    again. The caller's thread count is not an input: the preset's threads build it."""
    import lmpo.cache
    from lmpo.warmstart import cached_policy

    monkeypatch.setenv("LMPO_HOME", str(tmp_path / "home"))
    first = cached_policy("nano-chain-sum", progress=False, sft_overrides=TINY_SFT)
    record = json.loads((first / "lmpo-cache.json").read_text())
    assert record["inputs"]["config"]["steps"] == 20 and record["inputs"]["config"]["threads"] == 2
    assert set(record["inputs"]["versions"]) == {"python", "torch", "transformers", "lmpo"}
    assert "model.safetensors" in record["files"]
    other = cache_entry("nano-chain-sum", (*TINY_SFT, "lr=0.002"))[0]
    assert other != first and other.parent == first.parent
    digest = lmpo.cache.source_digest("lmpo.sft")
    monkeypatch.setattr(lmpo.cache, "source_digest", lambda module: digest[::-1])
    assert cache_entry("nano-chain-sum", TINY_SFT)[0] != first  # the builder's code changed
    monkeypatch.undo()
    monkeypatch.setenv("LMPO_HOME", str(tmp_path / "home"))
    lmpo.cache._seen.clear()  # a new process
    weights = first / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8] + b"\0" * 8)
    again = cached_policy("nano-chain-sum", progress=False, sft_overrides=TINY_SFT)
    assert again == first and "its files differ from those recorded" in capsys.readouterr().err
    assert (first.parent / (first.name + ".damaged")).is_dir()
    rebuilt = json.loads((again / "lmpo-cache.json").read_text())["files"]
    assert rebuilt["model.safetensors"] == record["files"]["model.safetensors"]  # deterministic


def test_source_digest_follows_function_level_imports_and_whole_subpackages():
    from lmpo.cache import source_digest

    assert source_digest("lmpo.sft") != source_digest("lmpo.reward_model_training")
    import lmpo.cache as cache

    names: dict = {}
    todo = ["lmpo.sft"]
    while todo:  # the same walk, to see its modules
        name = todo.pop()
        path = cache._module_file(name)
        if path is None or name in names:
            continue
        names[name] = path
        todo += list(cache._imports(path, name))
    assert "lmpo.tasks" in names and "lmpo.models" in names  # sft imports them in functions


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


def test_make_help_lists_every_target_of_the_makefile():
    import re

    root = Path(__file__).resolve().parents[1]
    text = (root / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):", text, re.M))
    shown = subprocess.run(["make", "-s", "help"], cwd=root, capture_output=True, text=True,
                           check=True).stdout
    listed = re.findall(r"^make ([a-z][a-z0-9-]*) ", shown, re.M)
    assert sorted(listed) == sorted(targets) and len(listed) == len(set(listed))
    phony = set(re.search(r"^\.PHONY:(.*?)(?<!\\)$", text, re.M | re.S).group(1)
                .replace("\\", " ").split())
    assert phony == targets


def test_maintainers_options_parse_but_stay_out_of_the_user_help(capsys):
    from lmpo.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["report", "d", "--rejudge", "--readme", "EBPO"])
    assert args.rejudge and args.readme == "EBPO"
    assert parser.parse_args(["methods", "--readme", "f.md"]).readme == "f.md"
    for command in ("report", "methods"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
        shown = capsys.readouterr().out
        assert "--readme" not in shown and "--rejudge" not in shown
    docs = Path(__file__).resolve().parents[1] / "docs"
    assert "(maintainers.md)" in (docs / "testing.md").read_text()
    assert all(f"--{o}" in (docs / "maintainers.md").read_text() for o in ("readme", "rejudge"))


def test_eval_of_a_model_folder_leaves_the_folder_as_it_was(tiny_policy_dir, tmp_path,
                                                            capsys):
    before = sorted(p.name for p in tiny_policy_dir.iterdir())
    common = ["eval", "--model", str(tiny_policy_dir), "--per-tier", "2",
              "--max-new-tokens", "4", "--device", "cpu", "--threads", "1"]
    assert main(common) == 0
    assert sorted(p.name for p in tiny_policy_dir.iterdir()) == before
    assert main([*common, "--json", str(tmp_path / "e.json")]) == 0
    assert json.loads((tmp_path / "e.json").read_text())["per_tier"]
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*common[:-4], "--device", "tpu"])
