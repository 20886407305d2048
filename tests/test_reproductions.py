"""The reproduction experiments (`experiments/*.yaml`) and their committed reports.

For each experiment file: its arms differ in exactly the keys its paper changes, and
every arm runs two steps (random-init nano policy) logging every metric its claims
read. For each committed report (`experiments/results/<name>/`): report.md is the
rendering of report.json, and the README's Results rows carry report.json's numbers.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lmpo.config import merge
from lmpo.experiments.design.conditions import name_at
from lmpo.experiments.design.spec import arm_config, check_differs, load_experiment
from lmpo.experiments.report.results import load, rendered
from lmpo.experiments.run.sweep import resolve_references
from lmpo.trainer.loop import train
from tests.test_experiments import TINY_BASE
from tests.test_trainer import for_tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.yaml"))
PILOTS = sorted(p.stem for p in (ROOT / "experiments/pilots").glob("*.yaml"))
REPORTS = sorted(p.parent.name for p in (ROOT / "experiments/results").glob("*/report.json"))

# What each experiment's arms may differ in, key by key (docs/reproductions.md, matched arms).
AC = {"advantage.hparams.gamma", "advantage.hparams.lam", "advantage.hparams.whiten"}
MATCHED = {
    # CE-GPPO (third edition): the authors' settings for every arm; DAPO is clip-higher
    # and the condition axis (rollout staleness) applied to every arm alike
    "cegppo": {"loss.name", "loss.hparams.eps_high", "loss.hparams.beta1", "loss.hparams.beta2",
               "rollout.staleness"},
    "output_reset": {"loss.name", "loss.hparams.alpha", "loss.hparams.weight",
                     "loss.hparams.eps_low", "loss.hparams.eps_high", "rollout.group_size",
                     "advantage.name", "kl.coef", "kl.kind", "kl.mode", "optim.epochs",
                     "optim.lr"} | AC,
}
# ESPO's third edition: the arms are PPO on the long-reasoning testbed with or without a
# stopping controller, so the controller's own settings are what differ
MATCHED["espo"] = {"controller.name"} | {f"controller.hparams.{k}" for k in (
    "beta", "warmup", "r_fail", "clip", "stop_value")}
# EBPO's third edition: the estimator, at every group size of the condition axis
MATCHED["ebpo"] = {"advantage.name", "advantage.hparams.scale", "advantage.hparams.prior",
                   "rollout.group_size"}
# and its curriculum pair: the prompt order alone
MATCHED["ebpo_curriculum"] = {"rollout.sampler"}
# DRPO's third edition: one recipe (advantages, aggregation) for every arm; the arms differ
# in the loss and, for one, a rollout correction; the condition axis (rollout dtype,
# staleness) applies to every arm alike
MATCHED["drpo"] = {"loss.name", "loss.hparams.eps_low", "loss.hparams.eps_high",
                   "loss.hparams.delta_low", "loss.hparams.delta_high",
                   "loss.hparams.clip_ratio_c", "loss.hparams.delta", "rollout.dtype",
                   "rollout.staleness", "rollout.correction.kind"}
MATCHED["output_reset_rlhf"] = MATCHED["output_reset"]
# CE-GPPO's entropy claim on the real testbed: the authors' settings for both arms
MATCHED["real_cegppo"] = {"loss.name", "loss.hparams.beta1", "loss.hparams.beta2"}
# bf16 vs float32 on the real testbed: the two precisions and nothing else
MATCHED["precision_real"] = {"rollout.dtype", "optim.dtype"}
# the survey of every group-family method: each loss as its preset states it (with GRPO's
# advantages), each estimator with PPO-clip
# (and the settings TRL added to PPO-clip; GDPO's and its GRPO twin's second reward)
MATCHED["zoo"] = {"advantage.name", "loss.agg", "loss.name", "optim.minibatches",
                  "loss.off_policy_mask_threshold", "loss.top_entropy_quantile",
                  "reward.extra"} | {
    f"loss.hparams.{k}" for k in (
        "adv_tau", "alpha", "beta", "beta1", "beta2", "clip_cov_lb", "clip_cov_ratio",
        "clip_cov_ub", "clip_ratio_c", "delta", "delta_high", "delta_low", "eps_high",
        "eps_low", "k_neg", "k_pos", "kl_cov_ratio", "kl_tau", "lambda_neg", "lambda_pos",
        "negative_weight", "positive_weight", "ppo_kl_coef", "tau", "tau_neg", "tau_pos",
        "threshold", "weight")}
# The fourth editions: EBPO's estimator at each G on the long tiers; DRPO's controls (the
# loss, the anchor's recompute) along the precision axis; Output Reset at matched KL and on
# long responses. A premise arm (seed_offset) differs from its twin in nothing but seeds.
MATCHED["ebpo4"] = MATCHED["ebpo"]
MATCHED["drpo4"] = {"loss.name", "loss.hparams.eps_low", "loss.hparams.eps_high",
                    "loss.hparams.delta", "rollout.dtype", "rollout.bf16_boundary",
                    "rollout.old_logp"}
# the noise measurement: two of drpo4's arms at its L0, without its levels
MATCHED["noise_drpo"] = {"loss.name", "loss.hparams.eps_low", "loss.hparams.eps_high",
                         "loss.hparams.delta", "rollout.old_logp"}
MATCHED["output_reset_rlhf4"] = {"loss.name", "loss.hparams.alpha", "loss.hparams.weight",
                                 "loss.hparams.eps_low", "loss.hparams.eps_high"}
MATCHED["output_reset_long4"] = (MATCHED["output_reset"] - {"optim.epochs", "optim.lr"})
# ESPO's fourth edition: PPO with or without a stopping controller (ESPO's or random
# stops at its savings, variant F), whose own settings are what differ
MATCHED["espo4"] = MATCHED["espo"] | {"controller.hparams.savings"}
# The real model's editions: CE-GPPO's betas; DRPO's loss along the precision axis
MATCHED["real_cegppo4"] = MATCHED["real_cegppo"]
MATCHED["real_drpo4"] = {"loss.name", "loss.hparams.eps_low", "loss.hparams.eps_high",
                         "loss.hparams.delta", "rollout.dtype", "rollout.bf16_boundary"}
# The fifth editions: DRPO's delta along the axis (its comparators run once, DPPO's mask
# thresholds its own), NVFP4 against bf16 for the premise arms; ESPO against random stops
# that read its run's token curve
MATCHED["drpo5"] = {"loss.name", "loss.hparams.eps_low", "loss.hparams.eps_high",
                    "loss.hparams.delta", "loss.hparams.delta_low", "loss.hparams.delta_high",
                    "loss.hparams.clip_ratio_c", "rollout.dtype", "rollout.old_logp"}
MATCHED["espo5"] = MATCHED["espo"] - {"controller.hparams.stop_value"} | {
    "controller.hparams.reference"}
# Pairs inside an experiment and the only keys (by prefix) they may differ in: the matched
# pairs of an experiment whose arms span two families differ in the loss alone; one method
# under two conditions differs in the condition alone.
LOSS = ("loss.",)
PAIRS = {"cegppo": [("grpo", "dapo", ("loss.hparams.eps_high",)), ("grpo", "cegppo", LOSS)]
         + [("cegppo", f"cegppo_b{b}", (f"loss.hparams.beta{b[0]}",))
            for b in ("2_0.5", "2_2", "1_0.25", "1_1")],
         "ebpo": [("grpo", "ebpo", ("advantage.",))],
         "ebpo_curriculum": [("ebpo_shuffled", "ebpo_easy_to_hard", ("rollout.sampler",))],
         "output_reset": [("grpo", "grpo_or", LOSS), ("ppo_clip", "ppo_or", LOSS)],
         "real_cegppo": [("grpo", "cegppo", LOSS)],
         "zoo": [("adv_gdpo", "adv_grpo_two_rewards", ("advantage.",)),
                 ("loss_grpo", "adv_grpo_two_rewards", ("reward.extra",)),
                 ("loss_grpo", "adv_remax", ("advantage.",))],
         "output_reset_rlhf": [("grpo", "grpo_or", LOSS), ("ppo_clip", "ppo_or", LOSS)],
         "drpo": [("grpo", "dppo", LOSS), ("grpo", "drpo", LOSS), ("dppo", "drpo", LOSS),
                  ("drpo", "drpo_d0.5", ("loss.hparams.delta",)),
                  ("grpo", "grpo_mis", ("rollout.correction",))],
         "ebpo4": [("grpo", "ebpo", ("advantage.",)), ("grpo", "grpo_premise", ())],
         "drpo4": [("grpo", "drpo", LOSS), ("grpo", "is_pg", LOSS), ("drpo", "is_pg", LOSS),
                   ("grpo", "grpo_rc", ("rollout.old_logp",)),
                   ("drpo", "drpo_rc", ("rollout.old_logp",)), ("grpo", "grpo_premise", ())],
         "output_reset_rlhf4": [("ppo_clip", "ppo_or", LOSS),
                                ("ppo_clip", "ppo_clip_premise", ())],
         "output_reset_long4": [("grpo", "grpo_or", LOSS), ("ppo_clip", "ppo_or", LOSS)],
         "espo4": [("espo", "espo_no_rfail", ("controller.hparams.",)),
                   ("ppo", "espo", ("controller.",)), ("espo", "espo_f", ("controller.",))],
         "real_cegppo4": [("grpo", "cegppo", LOSS), ("grpo", "grpo_premise", ())],
         "real_drpo4": [("grpo", "drpo", LOSS), ("grpo", "grpo_premise", ())],
         "drpo5": [("grpo", "drpo", LOSS), ("is_pg", "drpo", LOSS), ("dppo", "drpo", LOSS),
                   ("grpo", "grpo_rc", ("rollout.old_logp",)),
                   ("drpo", "drpo_rc", ("rollout.old_logp",)), ("grpo", "grpo_premise", ()),
                   ("grpo_premise", "grpo_premise_bf16", ("rollout.dtype",))],
         "espo5": [("ppo", "espo", ("controller.",)), ("espo", "espo_tm", ("controller.",)),
                   ("ppo", "ppo_premise", ())]}


def test_every_experiment_is_listed_here():
    assert EXPERIMENTS and set(EXPERIMENTS) == set(MATCHED)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_arms_differ_in_exactly_what_the_paper_changes(name):
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    assert set(check_differs(exp)) == MATCHED[name]
    assert len(exp.seeds) >= 3
    flat = exp.expand()  # with conditions, a pair is compared within each level it shares
    for a, b, keys in PAIRS.get(name, []):
        for level in exp.shared_levels([a, b]):
            pair = [flat.arm(name_at(x, level, exp.once)) for x in (a, b)]
            sub = replace(flat, arms=pair)
            assert {k for k in check_differs(sub) if not k.startswith(keys)} == set(), (
                a, b, level)


@pytest.mark.parametrize("name", PILOTS)
def test_a_pilot_never_uses_its_experiments_seeds(name):
    pilot = load_experiment(ROOT / "experiments/pilots" / f"{name}.yaml")
    check_differs(pilot)
    path = ROOT / "experiments" / f"{name}.yaml"
    if path.exists():
        assert not set(pilot.seeds) & set(load_experiment(path).seeds)


@pytest.mark.slow  # every arm of every experiment
@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_arm_runs_two_steps_and_logs_what_its_claims_read(name, tiny_policy_dir,
                                                                  tiny_rm_dir, tmp_path):
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    tiny = TINY_BASE | {"policy": str(tiny_policy_dir)}
    if (exp.base.get("reward") or {}).get("model"):  # a random reward model, not the trained one
        tiny |= {"reward": exp.base["reward"] | {"model": str(tiny_rm_dir)}}
    if (exp.base.get("rollout") or {}).get("dynamic_sampling"):
        # a random policy fails every group, which the filter would drop: no update, and
        # nothing the loss logs could be checked
        tiny = merge(tiny, {"rollout": {"dynamic_sampling": False}})
    exp.base = merge(exp.base, tiny)
    exp.steps = 2
    exp = exp.expand()  # with conditions, every arm at every level it runs at
    for arm in exp.arms:  # in the sweep's order: an arm a controller reads ("@espo") first
        read = {m for c in exp.claims
                if arm.name in c["arms"] + sum(c.get("by_level", {}).values(), [])
                for m in (c["metric"], c.get("x")) if m}
        cfg = arm_config(exp, arm, seed=0, threads=1)
        resolve_references(cfg, exp, arm.name, 0, tmp_path)
        run_dir = tmp_path / "runs" / arm.name / "seed0"
        train(for_tiny_tokenizer(cfg), run_dir, progress=False)
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").open()]
        assert [r["step"] for r in rows] == [1, 2]
        logged = set().union(*rows)
        assert read <= logged, (arm.name, read - logged)


@pytest.mark.parametrize("name", REPORTS)
def test_the_committed_report_md_renders_report_json(name):
    rep = load(ROOT / "experiments/results" / name)
    assert (ROOT / "experiments/results" / name / "report.md").read_text() == rendered(rep)
    for plot in rep["plots"]:
        assert (ROOT / "experiments/results" / name / plot).stat().st_size > 0


def test_the_committed_demo_report_renders_its_json():
    folder = ROOT / "docs/demo_report"
    rep = load(folder)
    assert (folder / "report.md").read_text() == rendered(rep)
    assert "dose_0.png" in rep["plots"] and all((folder / p).exists() for p in rep["plots"])
    levels = next(c for c in rep["claims"] if c["kind"] == "dose_response")["levels"]
    assert [lv["dose"] for lv in levels] == [0.0, 2.0, 8.0]


def test_the_results_pages_are_generated_from_the_committed_reports():
    """README's summary block and docs/results.md are exactly what the committed
    report.json files and experiments/results/summary.yaml give."""
    from lmpo.experiments.report.results import current_readme, entries, results_page

    assert (ROOT / "README.md").read_text() == current_readme(ROOT)
    assert (ROOT / "docs/results.md").read_text() == results_page(ROOT)
    listed = {e["report"] for e in entries(ROOT)}
    with_claims = {n for n in REPORTS if load(ROOT / "experiments/results" / n)["claims"]}
    assert listed == with_claims  # every report with claims has its row, and only those
    for e in entries(ROOT):
        assert 0 <= e["headline"] < len(load(ROOT / "experiments/results" / e["report"])["claims"])


@pytest.mark.parametrize("name", [n for n in REPORTS if load(
    ROOT / "experiments/results" / n).get("schema_version", 1) >= 3])
def test_committed_labels_follow_the_step_down_over_their_own_p_values(name):
    """Per family, p_adj is Holm's step-down over the report's own p values; a direction
    or spread claim is significant exactly when its p_adj <= 0.05 (unless an audit labels
    it); no interval inside +-min_effect reads direction only / inconclusive /
    underpowered; a dose-response level carries no label of its own; premises are not
    adjusted."""
    from lmpo.experiments.stats.multiplicity import holm_adjust

    claims = load(ROOT / "experiments/results" / name)["claims"]
    for family in {c.get("family") for c in claims}:
        members = [c for c in claims if c.get("family") == family and c.get("p") is not None]
        if family == "premise":  # each judged on its own interval, not adjusted (by design)
            assert all(c["p_adj"] == c["p"] for c in members)
            continue
        if family is None or "sequential" in family:
            continue
        # rows that test one comparison at one level (a split part repeating a claim of its
        # own) are one hypothesis: counted once
        unique = {(c.get("level"), c["claim"]): c["p"] for c in members}
        adjusted = dict(zip(unique, holm_adjust(list(unique.values())), strict=True))
        assert [c["p_adj"] for c in members] == pytest.approx(
            [adjusted[(c.get("level"), c["claim"])] for c in members], abs=1e-12)
        assert all(c["family_size"] == len(unique) for c in members)
    for c in claims:
        if c["verdict"] in ("confounded", "not engaged", "insufficient seeds", "premise not met",
                            "premise undecided") or c.get("family") == "premise":
            continue  # a label that stands in for the test's (or a premise's own: met, ...)
        if c["kind"] in ("direction", "spread", "dose_response"):
            assert (c["verdict"] in ("holds", "contradicted")) == (c["p_adj"] <= 0.05), c["claim"]
        lo, hi = c["ci_holm"]
        small = c.get("min_effect")
        if c["kind"] in ("direction", "dose_response") and small and -small < lo < hi < small:
            assert c["verdict"] not in ("direction only", "inconclusive", "underpowered")
        for level in c.get("levels") or []:
            assert "verdict" not in level
