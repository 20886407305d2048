"""The design rules a referee signs, on hand-written rows: an anchor-matched pair where the
arms' anchors differ, claims at the paper's strength, one bound rule (25% of the
comparator's gain over its warm start, on its own seeds), premises judged at the first
look and no stop on an undecided premise, each look's effect with a heterogeneity flag,
and the update's norm after the optimiser (the effective step) logged and read."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from tests.hand_sweep import BEFORE, hand_written_sweep
from tests.test_twins import IS_PG, decomposed


# ---------------------------------------------------------------- anchor-matched pairs
def test_arms_with_different_anchors_need_the_anchor_matched_arm(tmp_path, tiny_policy_dir):
    import yaml

    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.run.upfront import check_experiment

    def exp(anchor_arm):
        arms = {"drpo": {"preset": "drpo"}, "is_pg": IS_PG,
                "grpo": {"preset": "grpo", "overrides": {"rollout": {"old_logp": "recompute"}}}}
        claim = {"kind": "direction", "metric": "reward/mean", "arms": ["drpo", "grpo"],
                 "expect": "greater", "sentence": "DRPO beats GRPO", "twin": "is_pg"}
        if anchor_arm is not None:
            arms["drpo_rc"] = anchor_arm
            claim["anchor"] = "drpo_rc"
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump({
            "base": {"policy": str(tiny_policy_dir)}, "arms": arms, "seeds": 3, "steps": 2,
            "differs_in": ["loss", "advantage", "rollout.old_logp"], "twins": True,
            "claims": [claim]}, sort_keys=False))
        return load_experiment(path).expand()

    with pytest.raises(Exception, match=r"drpo and grpo differ in their anchor \(rollout."
                                        r"old_logp rollout vs recompute\); add drpo with"):
        check_experiment(exp(None), 0)
    with pytest.raises(Exception, match="anchor 'drpo_rc' is not drpo with grpo's anchor"):
        check_experiment(exp({"preset": "drpo"}), 0)
    flat = exp({"preset": "drpo", "overrides": {"rollout": {"old_logp": "recompute"}}})
    check_experiment(flat, 0)
    assert [(c.get("split"), c["arms"]) for c in flat.claims] == [
        (None, ["drpo", "grpo"]), ("mechanism", ["drpo", "is_pg"]),
        ("shared", ["is_pg", "grpo"]), ("anchor", ["drpo", "drpo_rc"]),
        ("matched", ["drpo_rc", "grpo"])]
    # arms that share their anchor need none (the twin alone decomposes the claim)
    check_experiment(decomposed(tmp_path, tiny_policy_dir, IS_PG).expand(), 0)


# ---------------------------------------------------------------- the paper's strength
def strength_sweep(tmp_path, ratio: float, reanalysis: bool):
    """GRPO's displacement `ratio` times PPO-clip's in every seed (noise 2%)."""
    rng = np.random.default_rng(0)
    claim = {"kind": "direction", "metric": "reward/mean", "arms": ["grpo", "ppo"],
             "expect": "greater", "sentence": "group methods displace far more",
             "strength": {"multiple": 10, "fraction": 0.5}, "primary": True}
    if reanalysis:
        claim["reanalysis"] = True
    data = {"arms": {"grpo": {"preset": "grpo"}, "ppo": {"preset": "ppo_clip"}}, "seeds": 4,
            "steps": 2, "differs_in": ["loss", "advantage", "critic", "kl",
                                       "rollout.group_size"], "claims": [claim]}
    noise = {s: 1 + 0.02 * rng.standard_normal() for s in range(4)}

    def rows(run):
        value = (0.1 * ratio if run.arm == "grpo" else 0.1) * noise[run.seed]
        return [{"step": s, "reward/mean": value} for s in (1, 2)]

    return hand_written_sweep(tmp_path, data, rows)


@pytest.mark.parametrize("ratio, label", [(1.2, "not met"), (8.0, "holds")])
def test_a_multiple_is_tested_at_the_declared_share_of_the_papers(tmp_path, ratio, label):
    """"~10x" at fraction 0.5: the headline is grpo / ppo >= 5 (a 1.2x edge holds as a
    direction, descriptive beside it, and does not meet the paper's strength)."""
    from lmpo.experiments.report.audit import judge_claims
    from lmpo.experiments.report.write import collect

    [ratio_claim, direction] = judge_claims(collect(strength_sweep(tmp_path, ratio, False)))
    assert ratio_claim["claim"] == "reward/mean: grpo / ppo >= 5.0"
    assert ratio_claim["role"] == "headline" and ratio_claim["verdict"] == label
    assert ratio_claim["effect"] == pytest.approx(ratio, rel=0.01)
    assert direction["role"] == "descriptive" and direction["verdict"] == "holds"


def test_a_reanalysis_says_so_in_its_label(tmp_path):
    from lmpo.experiments.report.audit import judge_claims
    from lmpo.experiments.report.claim_table import shown_verdict
    from lmpo.experiments.report.write import collect

    [ratio_claim, _] = judge_claims(collect(strength_sweep(tmp_path, 1.2, True)))
    assert ratio_claim["reanalysis"] is True
    assert "re-analysis" in shown_verdict(ratio_claim)


def test_a_reanalysis_file_adds_strength_and_a_marked_note(tmp_path):
    """reanalysis.yaml beside the sweep adds a claim's strength and a note, which the
    report prints as a re-analysis; a note that is not a string is refused."""
    from lmpo.errors import ConfigError
    from lmpo.experiments.report.write import report

    out = strength_sweep(tmp_path, 1.2, False)
    (tmp_path / "reanalysis.yaml").write_text(
        "claims:\n  0: {strength: {multiple: 10, fraction: 0.5}}\nnotes:\n  - length caps "
        "nothing\n")
    md = report(out)
    text = md.read_text()
    assert "**Note.** Re-analysis of the committed runs: length caps nothing" in text
    rep = json.loads(md.with_suffix(".json").read_text())
    assert rep["claims"][0]["reanalysis"] is True
    (tmp_path / "reanalysis.yaml").write_text("notes: [{a: 1}]\n")
    with pytest.raises(ConfigError, match="notes must be a list of strings"):
        report(out)


def test_a_malformed_strength_is_refused():
    from lmpo.errors import ConfigError
    from lmpo.experiments.design.claims import check_claim

    base = {"kind": "direction", "metric": "m", "arms": ["a", "b"], "expect": "greater",
            "sentence": "s"}
    for bad in ({"multiple": 0.5, "fraction": 0.5}, {"multiple": 10}, "10x"):
        with pytest.raises(ConfigError, match="strength is"):
            check_claim(base | {"strength": bad}, ["a", "b"], "claims[0]")
    with pytest.raises(ConfigError, match="two-arm direction claim"):
        check_claim({k: v for k, v in base.items() if k != "expect"} | {
            "kind": "equivalence", "margin": 0.1, "strength": {"multiple": 10,
                                                               "fraction": 0.5}},
            ["a", "b"], "claims[0]")


# ---------------------------------------------------------------- one bound rule
def bound_sweep(tmp_path, extra: dict | None = None):
    """The comparator (ppo) gains 0.4 over its warm start (0.1 -> 0.5) on its premise
    seeds and 0.2 on the claim's own; the method is 0.03 ahead, paired SD ~0.02."""
    claim = {"kind": "direction", "metric": "eval/accuracy_mean", "arms": ["or", "ppo"],
             "expect": "greater", "sentence": "OR is ahead", "min_effect": 0.41} | (
        extra or {})
    data = {"arms": {"or": {"preset": "ppo_or"}, "ppo": {"preset": "ppo_clip"},
                     "ppo_premise": {"preset": "ppo_clip", "seed_offset": 1000}},
            "seeds": 5, "steps": 2, "differs_in": ["loss"], "claims": [claim]}
    wiggle = [0.01, -0.02, 0.03, 0.0, -0.01]

    def rows(run):
        value = {"ppo": 0.3, "or": 0.33 + wiggle[run.seed], "ppo_premise": 0.5}[run.arm]
        return [{"step": 1, "eval/accuracy_mean": 0.2}, {"step": 2, "eval/accuracy_mean": value}]

    return hand_written_sweep(tmp_path, data, rows)


def test_the_default_bound_is_a_quarter_of_the_comparators_gain_on_its_own_seeds(tmp_path):
    from lmpo.experiments.report.audit import judge_claims
    from lmpo.experiments.report.write import collect

    [c] = judge_claims(collect(bound_sweep(tmp_path)))
    b = c["effect_bound"]
    assert b["reference"] == "ppo_premise" and b["ref_gain"] == pytest.approx(0.4)
    assert c["min_effect"] == pytest.approx(0.1) and b["value"] == pytest.approx(0.1)
    assert b["declared"] == 0.41 and b["gain_share"] == pytest.approx(0.25)
    diffs = 0.03 + np.array([0.01, -0.02, 0.03, 0.0, -0.01])
    assert b["sd_multiple"] == pytest.approx(0.1 / np.std(diffs, ddof=1))
    # the file's 0.41 would have read "negligible"; a quarter of the gain does not
    assert c["verdict"] != "negligible"


def test_a_cited_reason_keeps_the_declared_bound(tmp_path):
    from lmpo.experiments.report.audit import judge_claims
    from lmpo.experiments.report.claim_table import bound_text
    from lmpo.experiments.report.write import collect

    [c] = judge_claims(collect(bound_sweep(tmp_path, {"bound_source": "the paper's SD"})))
    assert c["min_effect"] == 0.41 and c["effect_bound"]["rule"] == "declared: the paper's SD"
    assert c["effect_bound"]["rule_value"] == pytest.approx(0.1)
    assert "the rule would give" in bound_text(c)


def test_without_a_premise_arm_the_comparators_own_seeds_give_the_gain(tmp_path):
    from lmpo.experiments.report.bounds import reference_arm

    class A:
        def __init__(self, name, offset=0):
            self.name, self.seed_offset = name, offset

    flats = {"ppo": {"loss.name": "ppo_clip", "seed": 1}, "x": {"loss.name": "ppo_clip"}}
    data = {"experiment": type("E", (), {"arms": [A("ppo"), A("x")]})()}
    assert reference_arm(data, "ppo", flats)[0] == "ppo"
    data["experiment"].arms[1] = A("x", 1000)
    assert reference_arm(data, "ppo", flats)[0] == "x"
    flats["x"]["loss.name"] = "ppo_or"
    assert reference_arm(data, "ppo", flats)[0] == "ppo"


# ---------------------------------------------------------------- premises and looks
def sequential_sweep(tmp_path, premise_values, effects):
    """A sequential design 5 + 5: a headline claim with per-seed `effects` (a - b), gated
    by a premise on its own arm's per-seed values (>= 0 expected)."""
    data = {"arms": {"a": {"preset": "grpo"}, "b": {"preset": "dapo"},
                     "p": {"preset": "dapo", "seed_offset": 1000}},
            "seeds": {"first": 0, "start": 5, "max": 10, "step": 5}, "steps": 2,
            "differs_in": ["loss", "rollout"],
            "claims": [{"kind": "direction", "metric": "reward/mean", "arms": ["a", "b"],
                        "expect": "greater", "sentence": "a beats b", "min_effect": 0.05,
                        "bound_source": "hand-written"}],
            "premises": [{"kind": "threshold", "metric": "reward/max", "arms": ["p"],
                          "statistic": "value", "expect": "above", "bound": 0.0,
                          "sentence": "q above 0", "source": "hand-written"}]}

    def rows(run):
        v = {"a": 1.0 + effects[run.seed], "b": 1.0, "p": 0.0}[run.arm]
        return [{"step": 2, "reward/mean": v, "reward/max": premise_values[run.seed]}]

    out = hand_written_sweep(tmp_path, data, rows)
    from dataclasses import replace

    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.run.sweep import plan

    exp = load_experiment(tmp_path / "exp.yaml")
    for run in plan(replace(exp, seeds=list(range(10))), out, jobs=1):  # the second look
        if run.seed >= 5:
            run.run_dir.mkdir(parents=True)
            (run.run_dir / "metrics.jsonl").write_text(json.dumps(rows(run)[0]) + "\n")
            (run.run_dir / "eval.json").write_text(json.dumps({"before": BEFORE}))
    return out


def test_a_stop_is_refused_while_the_premise_is_undecided(tmp_path):
    """The claim crosses the first look's boundary (a large, steady effect) but its premise
    is undecided there: the claim is held open, and decided only at the second look, where
    the premise (on its repeated interval) is met."""
    from lmpo.experiments.report.audit import design_decision, judge_claims
    from lmpo.experiments.report.write import collect

    premise = [0.3, -0.2, 0.5, -0.1, 0.2] + [1.0, 1.1, 0.9, 1.05, 0.95]
    effects = [0.50, 0.51, 0.49, 0.50, 0.52, 0.50, 0.49, 0.51, 0.50, 0.50]
    data = collect(sequential_sweep(tmp_path, premise, effects))
    record = design_decision(data)
    [claim] = record["claims"]
    assert claim["status"] == "rejected" and claim["look"] == 1  # 0-based: the second
    results = judge_claims(data)
    head = next(r for r in results if r["role"] != "premise")
    prem = next(r for r in results if r["role"] == "premise")
    assert head["look"] == 2 and head["verdict"] == "holds"
    assert prem["look"] == 2 and prem["verdict"] == "met"
    steady = [1.0] * 10  # a premise met at the first look: the stop is taken there
    data = collect(sequential_sweep(subdir(tmp_path), steady, effects))
    assert design_decision(data)["claims"][0]["look"] == 0


def test_a_heterogeneous_look_is_flagged_and_the_label_kept(tmp_path):
    from lmpo.experiments.report.audit import judge_claims
    from lmpo.experiments.report.write import collect

    premise = [1.0] * 10
    effects = [0.01, 0.03, 0.02, 0.00, 0.04] + [0.30, 0.32, 0.29, 0.31, 0.33]
    results = judge_claims(collect(sequential_sweep(tmp_path, premise, effects)))
    head = next(r for r in results if r["role"] != "premise")
    pl = head["per_look"]
    assert [b["n"] for b in pl["blocks"]] == [5, 5] and pl["test"] == "Welch t"
    assert pl["blocks"][0]["effect"] == pytest.approx(0.02)
    assert pl["heterogeneous"] and pl["p"] < 0.001
    assert head["verdict"] == "holds"  # descriptive only
    effects = [0.30, 0.32, 0.29, 0.31, 0.33, 0.31, 0.29, 0.30, 0.33, 0.30]
    results = judge_claims(collect(sequential_sweep(subdir(tmp_path), premise, effects)))
    assert not next(r for r in results if r["role"] != "premise")["per_look"]["heterogeneous"]


# ---------------------------------------------------------------- the effective step
def test_the_update_norm_is_the_parameters_change_in_float64():
    from lmpo.trainer.update import update_norm

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    net[1].bias.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in net.parameters() if p.requires_grad], lr=0.1)
    net(torch.randn(5, 3)).pow(2).sum().backward()
    before = [p.detach().clone() for p in net.parameters() if p.requires_grad]
    reference = [p.detach().double().clone() for p in net.parameters()]
    opt.step()
    expected = math.sqrt(sum(float(((p.detach().double() - r) ** 2).sum())
                             for p, r in zip(net.parameters(), reference, strict=True)))
    assert update_norm(net, before) == pytest.approx(expected, rel=1e-6)
    assert expected > 0


def test_a_run_logs_its_update_norm(tiny_policy_dir, tmp_path):
    from lmpo.config import load_config
    from lmpo.trainer.checkpoint import read_rows
    from lmpo.trainer.loop import train
    from lmpo.trainer.metric_names import CORE
    from lmpo.trainer.train_config import TrainConfig
    from tests.golden.runs import TINY

    assert "optim/update_norm" in CORE
    cfg = load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}", *TINY, "steps=2"])
    train(cfg, tmp_path / "run", progress=False)
    rows = read_rows(tmp_path / "run" / "metrics.jsonl")
    trained = [r for r in rows if r.get("train/updates")]
    assert trained and all(math.isfinite(r["optim/update_norm"]) for r in trained)
    # AdamW without weight decay moves nothing where the gradient is 0, and moves the
    # parameters wherever it is not
    assert all((r["optim/update_norm"] > 0) == (r["grad/norm"] > 0) for r in trained)


def subdir(tmp_path):
    (tmp_path / "b").mkdir()
    return tmp_path / "b"


# ---------------------------------------------------------------- per-seed warm starts
def test_each_seed_starts_from_its_own_warm_start_and_a_real_model_keeps_its_own(tmp_path):
    from lmpo.experiments.design.runs import arm_data
    from lmpo.experiments.design.spec import parse_experiment

    def exp(extra: dict):
        return parse_experiment({"arms": {"a": {"preset": "grpo"},
                                          "p": {"preset": "grpo", "seed_offset": 1000}},
                                 "steps": 2, "seeds": 3, "differs_in": []} | extra, "x", "x")

    per_seed = exp({})
    assert per_seed.warm_starts == "per_seed" and per_seed.to_dict()["warm_starts"] == "per_seed"
    assert arm_data(per_seed, per_seed.arm("a"), 41)["policy_seed"] == 41
    assert arm_data(per_seed, per_seed.arm("p"), 41)["policy_seed"] == 1041  # its own seeds
    shared = exp({"warm_starts": "shared"})
    assert "policy_seed" not in arm_data(shared, shared.arm("a"), 41)
    real = exp({"base": {"policy": "smollm2-135m-instruct"}})
    assert "policy_seed" not in arm_data(real, real.arm("a"), 41)  # the pretrained model
    folder = exp({"base": {"policy": str(tmp_path)}})
    assert "policy_seed" not in arm_data(folder, folder.arm("a"), 41)
    with pytest.raises(Exception, match="warm_starts must be one of per_seed, shared"):
        exp({"warm_starts": "each"})


def test_a_seeded_warm_start_is_its_own_sft_draw_cached_and_pinned(tmp_path, monkeypatch):
    """Two SFT seeds give two policies (each cached once), and the sweep pins each as
    `<name>-seed<k>`, which a run then reads before the cache."""
    from safetensors.torch import load_file

    from lmpo.warmstart import PINNED_ENV, pin, resolve_policy

    monkeypatch.setenv("LMPO_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(PINNED_ENV, raising=False)
    short = ("steps=2", "eval_per_tier=2", "threads=1")
    a = resolve_policy("nano-chain-sum", sft_overrides=short, seed=1, progress=False)
    b = resolve_policy("nano-chain-sum", sft_overrides=short, seed=2, progress=False)
    assert a != b and resolve_policy("nano-chain-sum", sft_overrides=short, seed=1,
                                     progress=False) == a
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert any(not torch.equal(wa[k], wb[k]) for k in wa)
    monkeypatch.setattr("lmpo.warmstart.cached_policy",
                        lambda name, sft_overrides=(), progress=True: a)
    pinned = pin("nano-chain-sum", tmp_path / "warmstarts", seed=1)
    assert pinned.name == "nano-chain-sum-seed1" and (pinned / "config.json").is_file()
    monkeypatch.setenv(PINNED_ENV, str(tmp_path / "warmstarts"))
    assert resolve_policy("nano-chain-sum", seed=1) == pinned


def test_a_sweep_saved_before_the_key_reads_as_shared(tmp_path):
    from lmpo.experiments.report.write import collect

    out = hand_written_sweep(tmp_path, {"arms": {"a": {"preset": "grpo"}}, "steps": 2,
                                        "seeds": 3, "differs_in": [], "claims": []},
                             lambda run: [{"step": 2, "reward/mean": 0.1}])
    saved = out / "experiment.yaml"
    saved.write_text("".join(line for line in saved.read_text().splitlines(True)
                             if not line.startswith("warm_starts")))
    assert collect(out)["experiment"].warm_starts == "shared"


# ---------------------------------------------------------------- time-matched controls
def reference_experiment(tmp_path, policy, ref="@espo"):
    import yaml

    from lmpo.experiments.design.spec import load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "base": {"policy": str(policy)},
        "arms": {"espo": {"preset": "espo"},
                 "random": {"preset": "espo", "overrides": {"controller": {
                     "name": "random_stop", "hparams": {"reference": ref}}}}},
        "seeds": 2, "steps": 2, "differs_in": ["controller"]}, sort_keys=False))
    return load_experiment(path)


def test_random_stops_read_the_same_seeds_espo_run_which_runs_first(tmp_path,
                                                                    tiny_policy_dir):
    import yaml

    from lmpo.experiments.run.dispatch import Dispatch
    from lmpo.experiments.run.launcher import Outcome
    from lmpo.experiments.run.sweep import plan

    exp = reference_experiment(tmp_path, tiny_policy_dir)
    runs = plan(exp, tmp_path / "sweep", jobs=1)
    by = {r.name: r for r in runs}
    saved = yaml.safe_load(by["random-seed1"].config.read_text())
    assert saved["controller"]["hparams"]["reference"] == str(
        tmp_path / "sweep" / "runs" / "espo" / "seed1")
    assert by["random-seed1"].after == ["espo-seed1"] and by["espo-seed1"].after == []

    class Pool:  # two at once; a run "finishes" when polled, espo-seed1 fails
        retries, started = 0, []

        def free(self):
            return True

        def start(self, run, env):
            self.started.append(run.name)
            if run.name != "espo-seed1":
                run.run_dir.mkdir(parents=True, exist_ok=True)
                (run.run_dir / "metrics.jsonl").write_text('{"step": 2}\n')
                (run.run_dir / "eval.json").write_text("{}")
            return run

        def poll(self, run):
            return Outcome(0 if run.name != "espo-seed1" else 1)

        def where(self, handle):
            return ""

    pool = Pool()
    lines = []
    sweep = Dispatch(exp, pool, [by["random-seed0"], by["random-seed1"], by["espo-seed0"],
                                 by["espo-seed1"]], say=lines.append)
    while sweep.busy:
        sweep.start({})
        sweep.settle()
    assert pool.started == ["espo-seed0", "espo-seed1", "random-seed0"]
    assert by["random-seed0"].status == "done" and by["random-seed1"].status == "failed"
    assert "the run it reads failed: espo-seed1" in by["random-seed1"].error


def test_a_comparator_reading_an_arms_run_rides_on_that_arms_own_runs():
    """Random stops that read ESPO's run, replayed on ESPO's own batches, read the run they
    ride on ("@run"); on another arm's runs they cannot be replayed (no comparator)."""
    from lmpo.experiments.design.comparators import OWN_RUN, own_curve

    spec = {"controller": {"name": "random_stop", "hparams": {"reference": "@espo",
                                                             "r_fail": -1.0}}}
    assert own_curve(spec, "espo")["controller"]["hparams"] == {"reference": OWN_RUN,
                                                                "r_fail": -1.0}
    assert own_curve(spec, "espo@L1")["controller"]["hparams"]["reference"] == OWN_RUN
    assert own_curve(spec, "ppo") == {}
    loss = {"loss": {"name": "grpo", "hparams": {}}}
    assert own_curve(loss, "ppo") == loss


def test_a_reference_to_no_arm_is_refused_up_front(tmp_path, tiny_policy_dir):
    from lmpo.experiments.run.sweep import plan

    with pytest.raises(Exception, match=r"controller reference: '@esp' names no other arm"):
        plan(reference_experiment(tmp_path, tiny_policy_dir, "@esp"), tmp_path / "s", jobs=1)
