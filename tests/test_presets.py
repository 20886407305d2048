"""Presets: `extends:` resolution, each method preset differs from its base only in what
its method defines, and in each ratio preset the mechanism visibly acts."""

from __future__ import annotations

import json

import pytest
import yaml

from lmpo import presets
from lmpo.config import ConfigError, flat_config, load_config, read_yaml
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

PRESETS = presets.names("train")
BASES = {"base", "base_ac", "real-demo"}  # settings of their own, not method presets

# What each method defines (methods.md, "Presets, matched comparisons ..."); `x.*` is any
# key under x. A preset differs from the one it extends in these keys and no others.
METHOD_KEYS = {
    "grpo": set(),
    "ppo_clip": set(),
    "dapo": {"loss.hparams.eps_high", "loss.agg", "rollout.dynamic_sampling",
             "rollout.max_gen_batches"},
    "dr_grpo": {"advantage.name", "loss.agg"},
    "cegppo": {"loss.name", "loss.hparams.*", "loss.agg"},
    "grpo_or": {"loss.name", "loss.hparams.*"},
    "ppo_or": {"loss.name", "loss.hparams.*"},
    "gspo": {"loss.name", "loss.hparams.*"},
    "cispo": {"loss.name", "loss.hparams.*", "loss.agg"},
    "dppo_tv": {"loss.name", "loss.hparams.*"},
    "drpo": {"loss.name", "loss.hparams.*", "loss.agg", "advantage.name"},
    "ebpo": {"advantage.name", "advantage.hparams.*"},
    "reinforce": {"loss.name", "loss.hparams.*", "loss.agg", "advantage.name",
                  "optim.minibatches"},  # no ratio: REINFORCE is on-policy by definition
    "espo": {"espo.enabled", "espo.mode", "espo.warmup", "espo.r_fail", "espo.beta",
             "espo.adapt_beta"},
    "espo_adaptive": {"espo.adapt_beta", "espo.target_rate", "espo.beta_lr"},
    "demo": set(),
}


def resolved(name: str) -> dict:
    """The preset's resolved config, flattened to dotted keys (hyper-parameters too)."""
    return flat_config(load_config(TrainConfig, name))


def allowed(key: str, keys: set[str]) -> bool:
    return key in keys or any(k.endswith(".*") and key.startswith(k[:-1]) for k in keys)


def test_every_preset_declares_what_its_method_defines():
    assert set(PRESETS) - BASES == set(METHOD_KEYS)


@pytest.mark.parametrize("name", sorted(METHOD_KEYS))
def test_a_method_preset_differs_from_its_base_only_in_its_method(name):
    parent = yaml.safe_load(presets.find(name, "train").read_text())["extends"]
    mine, theirs = resolved(name), resolved(parent)
    diff = {k for k in set(mine) | set(theirs)
            if mine.get(k, "<unset>") != theirs.get(k, "<unset>")}
    extra = sorted(k for k in diff if not allowed(k, METHOD_KEYS[name]))
    assert not extra, f"{name} differs from {parent} in keys its method does not define: " + \
        ", ".join(f"{k}: {theirs.get(k, '<unset>')!r} -> {mine.get(k, '<unset>')!r}"
                  for k in extra)


def test_the_actor_critic_base_shares_the_group_testbed():
    group, ac = resolved("base"), resolved("base_ac")
    for key in ("task", "policy", "rollout.clusters", "rollout.batch_size", "optim.lr",
                "optim.minibatches", "optim.epochs", "rollout.max_new_tokens"):
        assert group[key] == ac[key], key


def write(tmp_path, name, text):
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_extends_merges_mappings_and_replaces_everything_else(tmp_path):
    write(tmp_path, "parent", "steps: 7\nrollout: {batch_size: 16, clusters: [t2d1, t3d1]}\n"
                              "loss: {name: cegppo, hparams: {beta1: 0.3, beta2: 2.0}}\n")
    child = write(tmp_path, "child", "extends: parent\nrollout: {clusters: [t3d1]}\n"
                                     "loss: {hparams: {beta2: 0.5}}\n")
    data = read_yaml(child)
    assert data["steps"] == 7 and data["rollout"] == {"batch_size": 16, "clusters": ["t3d1"]}
    assert data["loss"] == {"name": "cegppo", "hparams": {"beta1": 0.3, "beta2": 0.5}}
    # a section naming another function keeps none of the parent's hyper-parameters
    other = write(tmp_path, "other", "extends: parent\nloss: {name: output_reset}\n")
    assert read_yaml(other)["loss"] == {"name": "output_reset"}
    # a path, relative to the extending file
    (tmp_path / "sub").mkdir()
    nested = write(tmp_path / "sub", "nested", "extends: ../child.yaml\nsteps: 9\n")
    assert read_yaml(nested)["steps"] == 9 and read_yaml(nested)["loss"]["hparams"]["beta1"] == 0.3


def test_extends_errors_are_clear(tmp_path):
    missing = write(tmp_path, "a", "extends: nowhere\n")
    with pytest.raises(ConfigError, match="extends: 'nowhere' names no file"):
        read_yaml(missing)
    write(tmp_path, "x", "extends: y\n")
    y = write(tmp_path, "y", "extends: x\n")
    with pytest.raises(ConfigError, match="extends cycle: y.yaml -> x.yaml -> y.yaml"):
        read_yaml(y)
    bad = write(tmp_path, "b", "extends: [a, b]\n")
    with pytest.raises(ConfigError, match="extends must be a preset name or a path"):
        read_yaml(bad)


# ---------------------------------------------------------------- active mechanisms
MECHANISMS = {
    "cegppo": ["loss/clipfrac_low", "loss/clipfrac_high"],
    "dapo": ["loss/clipfrac_low", "loss/clipfrac_high"],
    "ppo_clip": ["loss/clipfrac_low", "loss/clipfrac_high"],
    "grpo_or": ["loss/or/overshoot_frac"],
    "ppo_or": ["loss/or/overshoot_frac"],
    "dppo_tv": ["loss/dppo/masked_frac"],
    "drpo": ["drpo |w - 1|"],
}


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_the_mechanism_acts_in_the_first_20_steps(name, sft_run, tmp_path):
    """Each ratio preset, as configured (batch, G, minibatching), from the warm-started
    nano policy: its own diagnostic is non-zero. With one on-policy update per batch
    these were all 0 (the ratio is 1 up to float noise)."""
    cfg = load_config(TrainConfig, name, [
        f"policy={sft_run[0]}", "steps=20", "log.eval_every=1000", "log.eval_per_tier=4",
        "log.tensorboard=false", "log.policy_kl_every=1000", "log.checkpoint_every=1000"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    for r in rows:
        if "loss/drpo/weight_min" in r:
            r["drpo |w - 1|"] = max(1 - r["loss/drpo/weight_min"], r["loss/drpo/weight_max"] - 1)
    for key in MECHANISMS[name]:
        values = [r.get(key, 0.0) for r in rows]
        print(f"{name} {key}: step 20 {values[-1]:.4g}, mean over 20 steps "
              f"{sum(values) / len(values):.4g}")
        threshold = 1e-3 if key == "drpo |w - 1|" else 0.0
        assert max(values) > threshold, (key, values)
