"""lmpo compare / lmpo report: statistics and verdicts against hand-computed values, CI
coverage, differs_in, resume after crashes, failing arms, and the report's files."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import yaml

from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import (
    arm_config,
    check_differs,
    load_experiment,
    parse_experiment,
)
from lmpo.experiments.report.engagement import DEFAULT_FLOOR
from lmpo.experiments.report.write import report
from lmpo.experiments.run.sweep import Run, compare, prebuild
from lmpo.experiments.stats.seeds import EFFECTIVE, reduce_metric, summarize
from lmpo.trainer.train_config import TrainConfig


# ---------------------------------------------------------------- statistics
def test_summary_is_mean_sample_std_and_a_bootstrap_ci():
    s = summarize([0.5, 0.7, 0.9])
    assert s["mean"] == pytest.approx(0.7) and s["std"] == pytest.approx(0.2)  # ddof=1
    assert s["ci"][0] >= 0.5 and s["ci"][1] <= 0.9 and s["n"] == 3
    c = summarize([0.25] * 4)
    assert c["ci"] == [0.25, 0.25] and c["std"] == 0.0
    assert math.isnan(summarize([1.0])["std"])


def test_a_diagnostic_range_is_reported_by_its_extreme_over_the_run():
    from lmpo.experiments.report.write import diagnostic_row

    assert diagnostic_row("loss/drpo/weight_min")[1:] == ("loss/drpo/weight_min", "min")
    assert diagnostic_row("loss/drpo/weight_max")[1:] == ("loss/drpo/weight_max", "max")
    assert diagnostic_row("loss/clipfrac_high")[1:] == ("loss/clipfrac_high", "last_k")


def test_metric_reduction():
    rows = [{"step": 1, "x": 1.0}, {"step": 2}, {"step": 3, "x": 3.0}, {"step": 4, "x": 5.0}]
    assert reduce_metric(rows, "x") == 5.0
    assert reduce_metric(rows, "x", "last_k", k=2) == 4.0
    assert reduce_metric(rows, "x", "last_k", k=10) == 3.0
    # rebound: the last k-mean above the lowest k-mean; 0 for a trace that ends at its low
    dip = [{"step": i, "x": v} for i, v in enumerate([4.0, 2.0, 1.0, 3.0, 6.0])]
    assert reduce_metric(dip, "x", "rebound", k=2) == pytest.approx(4.5 - 1.5)
    assert reduce_metric(dip, "x", "rebound", k=1) == pytest.approx(6.0 - 1.0)
    assert reduce_metric(dip, "x", "rebound", k=9) == 0.0  # one window: no rebound
    assert reduce_metric(dip[:3], "x", "rebound", k=2) == 0.0  # ends at its low
    assert reduce_metric(dip, "x", "last_over_first", k=2) == pytest.approx(4.5 / 3.0)
    assert reduce_metric(dip, "x", "first_k", k=2) == 3.0  # an early window (a warm-up)
    assert reduce_metric(rows, "x", "first_k", k=2) == 2.0  # over the logged values
    assert reduce_metric(dip, "x", "max") == 6.0 and reduce_metric(dip[:3], "x", "max") == 4.0
    assert reduce_metric(dip, "x", "min") == 1.0 and reduce_metric(dip[:2], "x", "min") == 2.0
    # max_last_k: the largest after a burn-in (4.0 in the first step is not in the last 3)
    assert reduce_metric(dip, "x", "max_last_k", k=3) == 6.0
    assert reduce_metric(dip[:4], "x", "max_last_k", k=3) == 3.0
    assert reduce_metric(dip, "x", "gain") == 6.0 - 4.0  # last minus first logged
    with pytest.raises(KeyError, match="'y' was never logged"):
        reduce_metric(rows, "y")


def test_engagement_reads_the_claims_own_window():
    from lmpo.experiments.report.engagement import window

    assert window({"reduce": "first_k", "k": 30}) == ("first_k", 30)  # a warm-up window
    assert window({"reduce": "last_k"}) == ("last_k", 20)
    assert window({"reduce": "final"}) == ("mean", 20)  # a final evaluation: the whole run


def test_a_controller_pair_is_measured_by_its_stops_unless_the_comparator_rescored():
    """Every comparator logs weight_tv; a controller that scores a stop as the run's does
    leaves the weights as they are (0 by construction), so such a pair is measured by its
    stop decisions. Only a comparator that rescored the stops (it logs adv_tv) is measured
    by the weights."""
    from lmpo.experiments.report.engagement import pair_values

    ctl = {"name": "random_stop", "hparams": {"savings": 0.2, "r_fail": -1.0}}
    flats = {"espo": {"controller.name": "espo"}, "f": {"controller.name": "random_stop"}}

    def data(extra):
        rows = [{"step": s, "shadow/f/stop_diff": 0.3 + 0.1 * s, "shadow/f/weight_tv": 0.0,
                 **extra} for s in range(3)]
        return {"runs": {("espo", seed): {"finished": True, "rows": rows, "config": {
            "log": {"comparators": {"f": {"controller": ctl}}}}} for seed in (0, 1)}}

    values, metric, _ = pair_values(data({}), "espo", "f", {}, flats)
    assert metric == "shadow/f/stop_diff" and values == {0: pytest.approx(0.4),
                                                         1: pytest.approx(0.4)}
    values, metric, _ = pair_values(data({"shadow/f/adv_tv": 0.2}), "espo", "f", {}, flats)
    assert metric == "shadow/f/weight_tv" and values == {0: 0.0, 1: 0.0}


# ---------------------------------------------------------------- experiment files
TINY_BASE = {"rollout": {"batch_size": 16, "pool_size": 64, "max_new_tokens": 8},
             "log": {"eval_per_tier": 4, "eval_every": 2, "tensorboard": False,
                     "eval_max_new_tokens": 8, "checkpoint_every": 1}}


def experiment(tmp_path, policy, arms=None, differs_in=("loss",), seeds=2, steps=4,
               claims=()):
    data = {"base": TINY_BASE | {"policy": str(policy)},
            "arms": arms or {"grpo": {"preset": "grpo"}, "cegppo": {"preset": "cegppo"}},
            "seeds": seeds, "steps": steps, "differs_in": list(differs_in),
            "claims": list(claims)}
    path = tmp_path / "exp.yaml"
    path.write_text("# a tiny test experiment\n" + yaml.safe_dump(data, sort_keys=False))
    return load_experiment(path)


def test_an_experiment_file_extends_another(tmp_path):
    """A smoke variant: the other file's arms and claims, its own seeds, steps and base keys
    merged over the other's; an extends chain that loops is one line."""
    full = experiment(tmp_path, "models/mine", claims=[
        {"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
         "expect": "greater", "min_effect": 0.01, "sentence": "CE-GPPO earns more"}])
    (tmp_path / "smoke.yaml").write_text("# the same, smaller\nextends: exp.yaml\nseeds: 2\n"
                                         "steps: 1\nbase: {rollout: {batch_size: 8}}\n")
    smoke = load_experiment(tmp_path / "smoke.yaml")
    assert [a.name for a in smoke.arms] == ["grpo", "cegppo"] and smoke.claims == full.claims
    assert (smoke.seeds, smoke.steps, smoke.description) == ([0, 1], 1, "the same, smaller")
    assert smoke.base["rollout"] == {**TINY_BASE["rollout"], "batch_size": 8}
    assert smoke.base["policy"] == "models/mine"
    (tmp_path / "exp.yaml").write_text("extends: smoke.yaml\n")
    with pytest.raises(ConfigError, match="extends cycle: smoke.yaml -> exp.yaml -> smoke.yaml"):
        load_experiment(tmp_path / "smoke.yaml")


def test_the_demo_experiment_is_matched():
    exp = load_experiment("demo")
    assert set(check_differs(exp)) == {"loss.agg", "loss.hparams.beta1", "loss.hparams.beta2",
                                       "loss.name", "rollout.staleness"}
    flat = exp.expand()
    assert [a.name for a in flat.arms] == ["cegppo@L0", "grpo@L0", "cegppo@L1", "grpo@L1",
                                           "cegppo@L2", "grpo@L2"]
    # CE-GPPO's runs evaluate GRPO's loss on their batches, at every level
    cfg = arm_config(flat, flat.arm("cegppo@L2"), 0)
    assert cfg.log.comparators == {"grpo": {"loss": {
        "name": "ppo_clip", "hparams": {"eps_low": 0.2, "eps_high": 0.2, "clip_ratio_c": None,
                                        "delta": None},
        "agg": "seq-mean-token-mean"}}} and cfg.rollout.staleness == 8
    assert not arm_config(flat, flat.arm("grpo@L2"), 0).log.comparators


def test_differs_in_violations_fail_before_any_run(tiny_policy_dir, tmp_path):
    exp = experiment(tmp_path, tiny_policy_dir, arms={
        "grpo": {"preset": "grpo"},
        "fast": {"preset": "cegppo", "overrides": {"optim": {"lr": 1e-4}}}})
    with pytest.raises(ConfigError, match=r"differ in keys outside differs_in \['loss'\]: "
                                          r"optim.lr: grpo=2e-05, fast=0.0001"):
        compare(exp, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # a fresh --out is left as it was: absent


@pytest.mark.parametrize("data,msg", [
    ({"arms": {"a": {"preset": "grpo"}}, "steps": 0, "differs_in": []}, "steps must be"),
    ({"arms": {"a": {"preset": "grpo", "extra": 1}}, "steps": 2, "differs_in": []},
     "arm 'a' must be"),
    ({"arms": {"a": {"preset": "grpo"}}, "steps": 2, "differs_in": [], "seed": 3},
     "unknown experiment key"),
    ({"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}, "steps": 2,
      "differs_in": [], "claims": [{"kind": "direction", "metric": "m", "arms": ["a", "c"],
                                    "expect": "greater", "sentence": "s"}]},
     r"claims\[0\]: arms must name two different arms"),
    ({"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}, "steps": 2,
      "differs_in": [], "claims": [{"kind": "threshold", "metric": "m", "arms": ["a", "b"],
                                    "expect": "below", "sentence": "s"}]},
     r"a threshold claim needs \['bound', 'statistic'\]"),
    ({"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}, "steps": 2,
      "differs_in": [], "claims": [{"kind": "threshold", "metric": "m", "arms": ["a", "b"],
                                    "expect": "below", "sentence": "s", "bound": 1,
                                    "statistic": "value"}]},
     r"claims\[0\]: a claim on a value names one arm"),
    ({"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}, "steps": 2,
      "differs_in": [], "claims": [{"kind": "equivalence", "metric": "m", "arms": ["a", "b"],
                                    "margin": 1, "sentence": "s", "statistic": "value"}]},
     r"statistic must be one of \('difference', 'ratio'\) for a equivalence claim"),
])
def test_malformed_experiment_files_are_clear_errors(data, msg):
    with pytest.raises(ConfigError, match=msg):
        parse_experiment(data, "x", "x.yaml")


def test_a_claim_declared_descriptive_has_its_own_family():
    """Headline (primary), secondary (the rest) and descriptive (declared so): the role each
    expanded claim carries, which decides its Holm family and whether a sequential sweep
    waits for it; a claim cannot be both primary and descriptive."""
    claim = {"kind": "direction", "metric": "m", "arms": ["a", "b"], "expect": "greater",
             "sentence": "s"}
    data = {"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"}}, "steps": 2,
            "differs_in": ["loss"], "claims": [claim | {"primary": True}, claim,
                                                claim | {"descriptive": True}]}
    roles = [c["role"] for c in parse_experiment(data, "x", "x.yaml").expand().claims]
    assert roles == ["headline", "secondary", "descriptive"]
    data["claims"] = [claim | {"descriptive": True}]  # no primaries: still descriptive
    assert [c["role"] for c in parse_experiment(data, "x", "x.yaml").expand().claims] == [
        "descriptive"]
    data["seeds"] = {"first": 0, "start": 3, "max": 6, "step": 3}
    with pytest.raises(ConfigError, match="every claim here is descriptive"):
        parse_experiment(data, "x", "x.yaml")  # nothing for the looks to decide
    data["seeds"] = [0, 1]
    for bad, msg in [({"descriptive": True, "primary": True}, "not both"),
                     ({"descriptive": "yes"}, "descriptive must be true or false")]:
        data["claims"] = [claim | bad]
        with pytest.raises(ConfigError, match=msg):
            parse_experiment(data, "x", "x.yaml")


# ---------------------------------------------------------------- sweeps
def numbers(out: Path) -> dict:
    r = json.loads((out / "report.json").read_text())
    return {"arms": r["arms"], "claims": r["claims"]}


def test_a_crashed_sweep_resumes_to_the_same_report(sft_run, tmp_path, monkeypatch):
    """The same sweep from the warm-started policy (so rewards vary), uninterrupted and
    crashed (every run exits at once after step 2's row; the other crash points of a run
    are tests/test_resume.py's) then resumed: the report's numbers are identical. Its claims
    are judged: a claim whose arms differ in an undeclared key is confounded, one whose
    fixed level (with its source) is not reached is not engaged where its interval includes
    the null; every claim carries the pair's same-batch engagement, logged by cegppo's runs
    against grpo's loss, and identical after the crashes (so are the shadow rows)."""
    every = sorted(set(EFFECTIVE) - {"optim_steps"})  # mediators: the effective audit aside
    claims = [{"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
               "expect": "greater", "sentence": "s"},
              {"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
               "expect": "greater", "sentence": "only the loss function",
               "differs_in": ["loss.name", "loss.hparams"]},
              {"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
               "expect": "greater", "sentence": "beta engaged", "expects": every,
               "engaged": [{"arm": "cegppo", "metric": "loss/cegppo/beta_grad_frac",
                            "min": 0.99, "source": "a test's level"}]},
              {"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
               "expect": "greater", "sentence": "never logged", "expects": every,
               "engaged": [{"arm": "grpo", "metric": "data/groups_dropped", "min": 0.1,
                            "source": "a test's level"}]},
              {"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
               "expect": "greater", "sentence": "clean", "expects": every,
               "engaged": [{"arm": "cegppo", "metric": "loss/clipfrac", "min": 0.0,
                            "source": "a test's level"}],
               "min_effect": 0.01, "bound_source": "a test's bound, not the default rule"}]
    exp = experiment(tmp_path, sft_run[0], seeds=3, claims=claims)
    assert compare(exp, tmp_path / "clean", jobs=2, live=False) == 0
    report(tmp_path / "clean")
    monkeypatch.setenv("LMPO_CRASH_AT", "after_row@2")
    assert compare(exp, tmp_path / "crashed", jobs=2, live=False) == 1
    monkeypatch.delenv("LMPO_CRASH_AT")
    assert compare(exp, tmp_path / "crashed", jobs=2, live=False) == 0
    report(tmp_path / "crashed")
    assert numbers(tmp_path / "crashed") == numbers(tmp_path / "clean")
    rewards = numbers(tmp_path / "clean")["arms"]["grpo"]["held-out accuracy, all tiers"]
    assert rewards["mean"] > 0.2  # a real policy: the equality is not one of zeros
    judged = numbers(tmp_path / "clean")["claims"]
    assert (judged[1]["verdict"], judged[1]["reason"]) == ("confounded", "config: loss.agg")
    for c, why in ((judged[2], r"cegppo: loss/cegppo/beta_grad_frac = [0-9.e-]+ vs min 0.99"),
                   (judged[3], r"not logged: data/groups_dropped")):
        lo, hi = c["ci_holm"]
        if lo <= 0 <= hi:  # a significant interval is never hidden
            assert c["verdict"] == "not engaged" and re.fullmatch(
                why + r" \(source: a test's level\)", c["reason"])
        else:
            assert c["verdict"] in ("holds", "contradicted")
    assert judged[2]["engaged"][0]["ok"] is False and 0 <= judged[2]["engaged"][0]["value"]
    for c in judged:
        eng = c["engagement"]
        assert eng["metric"] == "shadow/grpo/weight_tv" and eng["comparator"] == "grpo"
        assert 0 < eng["value"] <= 1 and eng["n"] == 3 and eng["floor"] == DEFAULT_FLOOR
    assert judged[4]["verdict"] not in ("confounded", "not engaged") and \
        judged[4]["method"] == "paired t" and judged[4]["min_effect"] == 0.01
    assert all("ci_holm" in c and "mde" in c for c in judged)
    setup = json.loads((tmp_path / "clean" / "report.json").read_text())["setup"]
    # each arm's policy is named: here every arm starts from the experiment's SFT run
    assert setup["policies"] == {"grpo": str(sft_run[0]), "cegppo": str(sft_run[0])}
    assert f"policy `{sft_run[0]}`" in (tmp_path / "clean" / "report.md").read_text()
    effective = setup["effective"]
    for arm in ("grpo", "cegppo"):
        assert set(effective[arm]) == set(EFFECTIVE) | {"pre_clip_norm"}
        assert effective[arm]["update_share"]["mean"] == 1.0
        assert effective[arm]["optim_steps"]["mean"] == 4 * 4  # 4 steps x 4 minibatches
    assert "This experiment makes 5 claims" in (tmp_path / "clean" / "report.md").read_text()
    sweeps = json.loads((tmp_path / "crashed" / "sweep.json").read_text())
    assert len(sweeps) == 2 and all(s == "done" for s in sweeps[-1]["status"].values())
    assert all(s["wall_s"] is not None for s in sweeps)  # each invocation ended normally
    # a rerun of a finished sweep runs nothing
    assert compare(exp, tmp_path / "crashed", jobs=2, live=False) == 0
    assert json.loads((tmp_path / "crashed" / "sweep.json").read_text())[-1]["wall_s"] < 5


@pytest.mark.slow  # a sweep of several runs
def test_a_failing_arm_is_reported_and_the_others_finish(tiny_policy_dir, tmp_path, capsys):
    """A run that fails while training (its reward function raises) is reported with its
    log's last error; the other arm's runs finish. (A config that cannot build never gets
    this far: tests/test_upfront.py.)"""
    (tmp_path / "bad_reward.py").write_text(
        "def score(prompts, completions, answers, **meta):\n"
        "    raise ValueError('the grader is down')\n")
    exp = experiment(tmp_path, tiny_policy_dir, differs_in=["loss", "reward"], arms={
        "grpo": {"preset": "grpo"},
        "bad_reward": {"preset": "grpo", "overrides": {
            "reward": {"fn": f"{tmp_path / 'bad_reward.py'}:score"}}}})
    assert compare(exp, tmp_path / "out", jobs=2, live=False) == 1
    err = capsys.readouterr().err
    assert "2 of 4 runs failed (the others finished)" in err
    assert re.search(r"bad_reward-seed0: exit 2: .*the grader is down", err)
    assert all((tmp_path / "out" / "runs" / "grpo" / f"seed{s}" / "eval.json").exists()
               for s in (0, 1))


@pytest.mark.slow  # a sweep of several runs
def test_an_amended_sweep_reruns_only_what_changed_and_says_so(tiny_policy_dir, tmp_path,
                                                               capsys):
    """Rerunning with a note and a changed preset: the finished run of the changed arm is
    refused (not silently kept) until deleted; claims and arms are frozen; the report
    prints the note."""
    (tmp_path / "mine.yaml").write_text("# mine\nextends: grpo\n")
    arms = {"grpo": {"preset": "grpo"}, "mine": {"preset": "mine.yaml"}}
    exp = experiment(tmp_path, tiny_policy_dir, arms=arms, seeds=1, steps=2)
    assert compare(exp, tmp_path / "out", live=False) == 0
    (tmp_path / "mine.yaml").write_text("# mine\nextends: grpo\noptim: {lr: 1.0e-4}\n")
    exp = experiment(tmp_path, tiny_policy_dir, arms=arms, seeds=1, steps=2,
                     differs_in=["loss", "optim.lr"])
    exp.notes = ["mine's lr was raised after the first run"]
    assert compare(exp, tmp_path / "out", live=False) == 1
    assert "mine-seed0: finished under another config (optim.lr: 2e-05 -> 0.0001); delete" \
        in capsys.readouterr().err
    import shutil

    shutil.rmtree(tmp_path / "out" / "runs" / "mine")
    assert compare(exp, tmp_path / "out", live=False) == 0
    report(tmp_path / "out")
    assert "**Note.** mine's lr was raised after the first run" in \
        (tmp_path / "out" / "report.md").read_text()
    exp.claims = [{"kind": "direction", "metric": "reward/mean", "arms": ["mine", "grpo"],
                   "expect": "greater", "sentence": "s"}]
    with pytest.raises(ConfigError, match=r"holds a different experiment .*claims differ"):
        compare(exp, tmp_path / "out", live=False)


def test_a_base_hparam_an_arm_would_silently_lose_is_an_error(tiny_policy_dir, tmp_path):
    """A base's shared loss.hparams (no loss name) are meant for every arm; an arm that
    names another loss than its preset's would keep none of them (config.merge), so the
    experiment is refused, naming the key. Restated in the arm, or a base that names its
    loss (whose hparams belong to that loss), it builds."""
    arms = {"grpo": {"preset": "grpo"},
            "cegppo": {"preset": "grpo", "overrides": {"loss": {"name": "cegppo"}}}}
    exp = experiment(tmp_path, tiny_policy_dir, arms=arms)
    exp.base["loss"] = {"hparams": {"clip_ratio_c": 10.0}}
    with pytest.raises(ConfigError, match=r"arm 'cegppo': the base's "
                                          r"loss\.hparams\.clip_ratio_c would not apply"):
        check_differs(exp)
    exp.arms[1].overrides["loss"]["hparams"] = {"clip_ratio_c": 10.0}
    assert arm_config(exp, exp.arms[1], 0).loss.hparams["clip_ratio_c"] == 10.0
    exp.arms[1].overrides["loss"].pop("hparams")
    exp.base["loss"] = {"name": "ppo_clip", "hparams": {"clip_ratio_c": 10.0}}
    assert "clip_ratio_c" not in arm_config(exp, exp.arms[1], 0).loss.hparams


def test_a_sweep_starts_its_runs_seed_by_seed(tiny_policy_dir, tmp_path):
    """A sweep stopped part-way holds whole seeds of every arm: runs start seed-major, in
    the file's arm order, whatever order plan() lists them in."""
    from lmpo.experiments.run.sweep import plan, start_order

    exp = experiment(tmp_path, tiny_policy_dir, seeds=3, steps=2)
    runs = plan(exp, tmp_path / "out", jobs=1)
    assert [(r.arm, r.seed) for r in runs][:2] == [("grpo", 0), ("grpo", 1)]  # arm-major
    assert [(r.arm, r.seed) for r in start_order(exp, runs)] == [
        ("grpo", 0), ("cegppo", 0), ("grpo", 1), ("cegppo", 1), ("grpo", 2), ("cegppo", 2)]


def test_a_key_added_later_at_its_default_is_not_a_config_change(tmp_path):
    from lmpo.config import load_config, to_dict
    from lmpo.experiments.run.sweep import config_changes

    cfg = load_config(TrainConfig, "dapo")
    old = to_dict(cfg)
    del old["rollout"]["max_gen_batches"]  # a run made before the key existed
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert config_changes(tmp_path, cfg) == "rollout.max_gen_batches: '<unset>' -> 10"
    cfg.rollout.max_gen_batches = 1  # the default: the old run did exactly this
    assert config_changes(tmp_path, cfg) == ""
    cfg.optim.lr = 1e-4
    assert config_changes(tmp_path, cfg) == "optim.lr: 2e-05 -> 0.0001"


def test_warm_starts_are_built_once_before_the_runs_and_a_bad_policy_is_left_to_them(
        tmp_path, monkeypatch):
    import lmpo.warmstart

    asked = []

    def resolve(policy, **kwargs):
        asked.append(policy)
        if policy == "missing":
            raise ConfigError("policy 'missing' is neither a Hugging Face model folder")
        return Path(policy)

    monkeypatch.setattr(lmpo.warmstart, "resolve_policy", resolve)
    runs = []
    for i, (policy, status) in enumerate([("nano-chain-sum", "pending"), ("missing", "pending"),
                                          ("nano-chain-sum", "pending"), ("other", "done")]):
        config = tmp_path / f"{i}.yaml"
        config.write_text(yaml.safe_dump({"policy": policy}))
        runs.append(Run("a", i, config, tmp_path / str(i), tmp_path / f"{i}.log", status))
    prebuild(runs)
    assert asked == ["nano-chain-sum", "missing"]  # once each, finished runs' not at all


def test_a_sweep_pins_its_warm_starts_and_its_runs_use_the_pinned_copy(tmp_path, monkeypatch):
    """The first look copies the cached warm start into the sweep's warmstarts/ (without the
    cache folder's path); a later look on a machine whose cache holds other weights (SFT on
    another CPU ends elsewhere) keeps the pinned copy, which resolve_policy returns under
    LMPO_WARMSTARTS; without it, the cache's."""
    import lmpo.warmstart as ws

    built = []

    def cached(name, **kwargs):  # each call: another machine's build of the same preset
        built.append(name)
        folder = tmp_path / f"cache{len(built)}" / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(bytes([len(built)]) * 8)
        (folder / "sft_config.yaml").write_text("task: chain_sum\nout: /a/cache/folder\n")
        return folder

    monkeypatch.setattr(ws, "cached_policy", cached)
    monkeypatch.delenv(ws.PINNED_ENV, raising=False)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"policy": "nano-chain-sum"}))
    runs = [Run("a", 0, config, tmp_path / "r", tmp_path / "r.log", "pending")]
    out = tmp_path / "sweep"
    prebuild(runs, out)
    pinned = out / "warmstarts" / "nano-chain-sum"
    assert (pinned / "model.safetensors").read_bytes() == bytes([1]) * 8
    assert (pinned / "sft_config.yaml").read_text() == "task: chain_sum\n"
    prebuild(runs, out)  # the next look: nothing rebuilt, the pin kept
    assert built == ["nano-chain-sum"]
    monkeypatch.setenv(ws.PINNED_ENV, str(out / "warmstarts"))
    assert ws.resolve_policy("nano-chain-sum") == pinned
    monkeypatch.delenv(ws.PINNED_ENV)
    assert ws.resolve_policy("nano-chain-sum").parent.name == "cache2"


def test_list_prints_each_runs_command_in_start_order(tiny_policy_dir, tmp_path, capsys):
    exp = experiment(tmp_path, tiny_policy_dir)
    assert compare(exp, tmp_path / "out", list_only=True) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 4 and all(" -m lmpo train --config " in x and x.endswith("--resume")
                                   for x in lines)
    assert [re.search(r"configs/(\S+)\.yaml", x).group(1) for x in lines] == [
        "grpo-seed0", "cegppo-seed0", "grpo-seed1", "cegppo-seed1"]
    assert not (tmp_path / "out" / "runs").exists()


@pytest.mark.slow  # a sweep of several runs
def test_report_files_every_png_it_names_is_an_image(tiny_policy_dir, tmp_path):
    import matplotlib.image

    exp = experiment(tmp_path, tiny_policy_dir, seeds=2)
    assert compare(exp, tmp_path / "out", jobs=2, live=False) == 0
    md = report(tmp_path / "out").read_text()
    pngs = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)
    assert {"curves.png", "diagnostics.png", "tokens.png"} <= set(pngs)
    for name in pngs:
        image = matplotlib.image.imread(tmp_path / "out" / name)
        assert image.ndim == 3 and image.shape[0] > 100
    for s in ("## Setup", "| `loss.name` | ppo_clip | cegppo |", "## Appendix: every arm",
              "held-out accuracy, trained tiers", "loss/clipfrac_low", "### Effective behaviour",
              "share of optimiser steps rescaled by gradient-norm clipping",
              "Note: the per-arm tables"):
        assert s in md, s
    assert os.path.exists(tmp_path / "out" / "report.json")


@pytest.mark.slow  # a sweep of several runs
def test_the_readme_walkthrough_compares_a_users_own_loss(tiny_policy_dir, tmp_path):
    """In a fresh process: building the arms imports the user's module, which registers
    its loss in the (global) registry."""
    import subprocess
    import sys

    from tests.test_install import MY_LOSS

    (tmp_path / "my_loss.py").write_text(MY_LOSS)
    (tmp_path / "capped.yaml").write_text(
        "# capped\nextends: grpo\nimports: [my_loss.py]\n"
        "loss: {name: capped_pg, hparams: {cap: 1.5}}\n")
    experiment(tmp_path, tiny_policy_dir, seeds=1, steps=2, differs_in=["loss", "imports"],
               arms={"grpo": {"preset": "grpo"}, "capped": {"preset": "capped.yaml"}})
    run = subprocess.run([sys.executable, "-m", "lmpo", "compare", "--config", "exp.yaml",
                          "--out", "out", "--jobs", "2"], cwd=tmp_path, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    row = json.loads((tmp_path / "out/runs/capped/seed0/metrics.jsonl").read_text()
                     .splitlines()[-1])
    assert "loss/capped_frac" in row
