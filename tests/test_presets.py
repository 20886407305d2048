"""Presets: `extends:` resolution, each method preset differs from its base only in what
its method defines (read from the registries), and each loss that declares a mechanism
shows it acting in its preset."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from lmpo import presets
from lmpo.advantages import advantage_meta, list_advantages
from lmpo.config import ConfigError, flat_config, load_config, read_yaml
from lmpo.losses import list_losses, loss_meta
from lmpo.rollout import CONTROLLERS, list_controllers
from lmpo.trainer.filters import FILTER_KEYS
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

PRESETS = presets.names("train")


def parent(name: str) -> str | None:
    return yaml.safe_load(presets.find(name, "train").read_text()).get("extends")


# settings of their own, not a method: the testbeds (no parent, or named base*)
BASES = {n for n in PRESETS if parent(n) is None or n.startswith("base")}
# a method preset configures its parts: these sections, and the batch filter's keys
PART_SECTIONS = ("loss.", "advantage.", "controller.", *(k for k in FILTER_KEYS))


def resolved(name: str) -> dict:
    """The preset's resolved config, flattened to dotted keys (hyper-parameters too)."""
    return flat_config(load_config(TrainConfig, name))


def declared(cfg: TrainConfig) -> set[str]:
    """Keys outside the parts' sections that the parts this config names declare they set
    (registry metadata `preset_keys`)."""
    return {*loss_meta(cfg.loss.name)["preset_keys"],
            *advantage_meta(cfg.advantage.name)["preset_keys"],
            *CONTROLLERS.meta(cfg.controller.name)["preset_keys"]}


def test_there_are_method_presets_and_bases():
    assert {"base", "base_ac", "real-demo"} <= BASES and len(set(PRESETS) - BASES) >= 10


def test_every_registered_part_has_a_preset():
    """A loss, estimator or controller is its file, its preset and its test: the preset
    is what `lmpo compare` arms and the mechanism tests start from."""
    used = {"loss": set(), "advantage": set(), "controller": set()}
    for name in PRESETS:
        cfg = load_config(TrainConfig, name)
        for part in used:
            used[part].add(getattr(cfg, part).name)
    assert set(list_losses()) <= used["loss"], set(list_losses()) - used["loss"]
    assert set(list_advantages()) <= used["advantage"]
    assert set(list_controllers()) <= used["controller"]


@pytest.mark.parametrize("name", sorted(set(PRESETS) - BASES))
def test_a_method_preset_differs_from_its_base_only_in_its_method(name):
    """Only in the sections of the parts it configures (loss, estimator, controller, batch
    filter) and in the keys those parts declare; never in the testbed (task, policy, batch,
    lr, minibatching, KL, evaluation)."""
    mine, theirs = resolved(name), resolved(parent(name))
    diff = {k for k in set(mine) | set(theirs)
            if mine.get(k, "<unset>") != theirs.get(k, "<unset>")}
    allowed = declared(load_config(TrainConfig, name))
    extra = sorted(k for k in diff if not k.startswith(PART_SECTIONS) and k not in allowed)
    assert not extra, f"{name} differs from {parent(name)} in keys its method does not " \
        "declare: " + ", ".join(f"{k}: {theirs.get(k, '<unset>')!r} -> "
                                f"{mine.get(k, '<unset>')!r}" for k in extra)


@pytest.mark.parametrize("name", sorted(set(PRESETS) - BASES))
def test_a_method_whose_aggregation_is_the_method_states_it(name):
    """LUSPO's length weighting and GMPO's per-sequence loss are their aggregation: a preset
    that inherited the testbed's seq-mean-token-mean ran GSPO under LUSPO's name (the zoo's
    first run: the two arms were identical to the last digit)."""
    cfg = load_config(TrainConfig, name)
    meta = loss_meta(cfg.loss.name)
    if meta["agg_is_method"]:
        assert cfg.loss.agg in (None, meta["default_agg"]), (name, cfg.loss.agg)


def test_the_preset_rule_catches_a_testbed_change(tmp_path):
    """The rule above is not vacuous: a loss preset that also changes the lr fails it."""
    (tmp_path / "mine.yaml").write_text("extends: grpo\nloss: {name: cegppo}\n"
                                        "optim: {lr: 1.0e-4}\n")
    cfg = load_config(TrainConfig, str(tmp_path / "mine.yaml"))
    diff = {k for k, v in flat_config(cfg).items() if resolved("grpo").get(k) != v}
    assert {k for k in diff if not k.startswith(PART_SECTIONS)} - declared(cfg) == {"optim.lr"}


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


def test_on_your_own_data_the_testbed_keys_must_be_yours(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    own = ["policy=my-model", "rollout.clusters=null", "rollout.max_new_tokens=64",
           "log.eval_max_new_tokens=64"]
    # each key inherited from a shipped preset or the defaults is named with its value
    for preset in ("cegppo", None):
        for left_out in range(len(own)):
            given = [f"task={data}", *own[:left_out], *own[left_out + 1:]]
            key, _, _ = own[left_out].partition("=")
            with pytest.raises(ConfigError, match=rf"would apply: {re.escape(key)}="):
                load_config(TrainConfig, preset, given)
    # set in the user's own file (which extends the method preset) or on the command line
    mine = write(tmp_path, "mine", f"extends: cegppo\ntask: {data}\npolicy: my-model\n"
                                   "rollout: {clusters: null, max_new_tokens: 64}\n")
    with pytest.raises(ConfigError, match=r"would apply: log.eval_max_new_tokens=32; set"):
        load_config(TrainConfig, mine)
    cfg = load_config(TrainConfig, mine, ["log.eval_max_new_tokens=64"])
    assert (cfg.loss.name, cfg.policy, cfg.rollout.clusters) == ("cegppo", "my-model", None)
    # a built-in task keeps the testbed's values
    assert load_config(TrainConfig, "cegppo").rollout.clusters == ["t3d1"]


# ---------------------------------------------------------------- active mechanisms
def mechanism_presets() -> dict[str, str]:
    """{preset: loss} for every loss that declares `acts` (the metric its mechanism moves
    in the first 20 steps), once per estimator family: the preset named like the loss if
    there is one, else the first by name."""
    chosen: dict[tuple[str, bool], str] = {}
    for name in sorted(set(PRESETS) - BASES, key=lambda n: (n not in list_losses(), n)):
        cfg = load_config(TrainConfig, name)
        if loss_meta(cfg.loss.name)["acts"]:
            chosen.setdefault((cfg.loss.name, cfg.actor_critic), name)
    return {preset: loss for (loss, _), preset in chosen.items()}


MECHANISMS = mechanism_presets()


def test_every_loss_that_declares_a_mechanism_has_a_preset_that_shows_it():
    declaring = {n for n in list_losses() if loss_meta(n)["acts"]}
    assert declaring and declaring == set(MECHANISMS.values())


@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_the_mechanism_acts_in_the_first_40_steps(name, sft_run, tmp_path):
    """Each such preset, as configured (batch, G, minibatching), from the warm-started nano
    policy (the `nano-chain-sum` warm start): its loss's `acts` metric exceeds its level
    within 40 steps (a run stopped at step 3 where it already has, else resumed to 40;
    DPPO's hard mask first acts at step 24 here). With one on-policy update per batch these
    were all 0 (the ratio is 1 up to float noise)."""
    acts = loss_meta(MECHANISMS[name])["acts"]
    cfg = load_config(TrainConfig, name, [
        f"policy={sft_run[0]}", "steps=40", "log.eval_every=1000", "log.eval_per_tier=4",
        "log.tensorboard=false", "log.policy_kl_every=1000", "log.checkpoint_every=1000"])
    for steps in (3, 40):  # most act at once; the others run on (a resume) to step 40
        train(replace(cfg, steps=steps), tmp_path / "run", resume=steps > 3, progress=False)
        rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
        values = [r.get(acts["metric"], 0.0) for r in rows]
        if max(values) > acts["above"]:
            break
    print(f"{name} {acts['metric']}: step {len(values)} {values[-1]:.4g}, mean over the steps "
          f"{sum(values) / len(values):.4g}")
    assert max(values) > acts["above"], (acts, values)


def test_the_real_testbed_is_the_surveyed_candidate_that_met_the_bar():
    """base_real trains on the survey's chosen candidate (the same task, parameters and
    system turn), and the committed survey shows it in the bar docs/testbed.md sets: warm
    sampled accuracy 20-60%, mean response 32-96 tokens; bf16 rollouts and updates."""
    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "survey", root / "experiments" / "real_testbed_survey.py")
    survey = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(survey)
    task, params, system = survey.CANDIDATES["products_2x1_steps"]
    cfg = load_config(TrainConfig, "base_real")
    shared = {k: v for k, v in cfg.task_params.items() if k != "tiers"}
    (trained,) = cfg.rollout.clusters
    assert (cfg.task, shared | cfg.task_params["tiers"][trained], cfg.system_prompt) == \
        (task, params, system)
    rows = [json.loads(x) for x in (root / "experiments/results/real_survey.jsonl").open()]
    (row,) = [r for r in rows if r["candidate"] == "products_2x1_steps"]
    assert 0.2 <= row["sampled_accuracy"] <= 0.6 and 32 <= row["sampled_length_mean"] <= 96
    assert cfg.rollout.max_new_tokens == row["max_new_tokens"]
    assert (cfg.rollout.dtype, cfg.optim.dtype) == ("bfloat16", "bfloat16")
    assert cfg.policy == "smollm2-135m-instruct" and cfg.reward.fn == "last_number"


def test_an_experiments_title_is_its_first_sentence_even_across_lines(tmp_path):
    """The title a report shows: the first sentence of the header's first paragraph, never
    cut mid-sentence (a line that goes on with a proper noun or a number continues it; a
    full stop inside parentheses or quotes does not end it); `lmpo presets` keeps the first
    line."""
    from lmpo.presets import description, title

    cases = {
        "# A vs B, with the\n# authors' settings. More text\n# here.\nsteps: 1\n":
            "A vs B, with the authors' settings.",
        "# Title: no full stop\n# Second line goes on\n": "Title: no full stop Second line goes on",
        "# A question? One run once learned\n# 40 -> 56%.\n": "A question?",
        "# at the group size where X found\n# EBPO's gain largest.\n#\n# More.\n":
            "at the group size where X found EBPO's gain largest.",
        "# A (e.g. this. that) b.\n": "A (e.g. this. that) b.",
        "# A pilot (seed 100,\n# 40 steps), before it runs\n#\n# Notes.\n":
            "A pilot (seed 100, 40 steps), before it runs",
        '# They "differ. Only\n# in the loss").\n# Next.\n': 'They "differ. Only in the loss").',
        "steps: 1\n# a later comment\n": "",
    }
    for text, want in cases.items():
        (tmp_path / "p.yaml").write_text(text)
        assert title(tmp_path / "p.yaml") == want, text
    (tmp_path / "p.yaml").write_text("# A vs B, with the\n# authors' settings.\n")
    assert description(tmp_path / "p.yaml") == "A vs B, with the"
