"""`lmpo compare --engine verl` against verl's own config (make test-verl): every mappable
arm of every committed experiment composes verl's ppo_trainer config, every mapped setting
reads back with the value lmpo meant, and the resolved actor config builds and runs the
lmpo loss. Each distinct arm is composed once (seed 0)."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
import torch

verl = pytest.importorskip("verl", reason="verl not installed: run `make test-verl`")
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from lmpo.experiments.design.spec import load_experiment  # noqa: E402
from lmpo.experiments.engines.verl_launch import hydra_value, launch  # noqa: E402
from lmpo.integrations import verl as lmpo_verl  # noqa: E402
from lmpo.losses import aggregate, get_loss, loss_meta  # noqa: E402
from tests.test_verl import batch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p for p in (ROOT / "experiments").glob("*.yaml"))
CFG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")


def mappable():
    out = []
    for path in EXPERIMENTS:
        exp = load_experiment(path).expand()  # arms x condition levels
        for arm in exp.arms:
            run = launch(exp, arm, exp.seeds[0])
            if not run.refused:
                out.append(pytest.param(run, id=f"{path.stem}-{arm.name}"))
    return out


RUNS = mappable()


def test_some_arm_of_most_experiments_maps():
    assert len({r.id.split("-")[0] for r in RUNS}) >= 4


FILLED = {"$MICRO_BATCH": 2, "$GPUS_PER_NODE": 1, "$NNODES": 1}  # what a user would set


def same(got, want) -> bool:
    if isinstance(want, list):
        return list(got) == want
    if isinstance(want, bool) or isinstance(got, bool):
        return got == want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=1e-12)
    return str(got) == str(want)


@pytest.mark.parametrize("run", RUNS)
def test_each_mapped_setting_reads_back_and_the_loss_runs(run):
    settings = {k: FILLED.get(v, v) if isinstance(v, str) else v
                for k, v in run.settings.items()}
    overrides = [f"{k}={hydra_value(v)}" for k, v in settings.items()]
    with initialize_config_dir(config_dir=CFG_DIR, version_base=None):
        cfg = compose(config_name="ppo_trainer", overrides=overrides)
    for key, want in settings.items():
        got = OmegaConf.select(cfg, key.lstrip("+"))
        assert same(got, want), (key, got, want)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    name = actor.policy_loss.loss_mode.removeprefix("lmpo_")
    fn = core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
    core_algos.get_adv_estimator_fn(cfg.algorithm.adv_estimator)
    logp, old, adv, mask = batch(3)
    torch.manual_seed(0)
    loss, _ = fn(old, logp, adv, mask, actor.loss_agg_mode, actor)
    hp = lmpo_verl.resolve_hparams(name, actor)
    torch.manual_seed(0)
    tok, _ = get_loss(name, **hp)(logp, old, adv, mask)
    fixed = loss_meta(name)["peer_agg"].get("verl")  # verl's own reduction (geo_mean)
    want = lmpo_verl.row_mean(tok, mask) if fixed == "row-mean" else \
        core_algos.agg_loss(tok, mask, fixed or actor.loss_agg_mode)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-14)
    assert aggregate(tok, mask, actor.loss_agg_mode).isfinite()


def test_lmpo_report_judges_runs_that_verls_file_logger_wrote(tmp_path, monkeypatch):
    """Logs written by verl's own FileLogger, where `--engine verl` points it, become rows
    `lmpo report` judges; a claim on a metric verl does not log says so."""
    import json

    import yaml
    from verl.utils.tracking import FileLogger

    from lmpo.cli import main
    from lmpo.experiments.report.write import report

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "arms": {"grpo": {"preset": "grpo"}, "dapo": {"preset": "dapo"}}, "seeds": [0, 1, 2],
        "steps": 3, "differs_in": ["loss", "rollout"],
        "claims": [{"kind": "direction", "metric": "reward/mean", "arms": ["dapo", "grpo"],
                    "differs_in": ["loss", "rollout"], "expect": "greater", "sentence": "s1"},
                   {"kind": "direction", "metric": "eval/accuracy_trained",
                    "arms": ["dapo", "grpo"], "differs_in": ["loss", "rollout"],
                    "expect": "greater", "sentence": "s2"}]}))
    out = tmp_path / "sweep"
    assert main(["compare", "--config", str(path), "--out", str(out), "--engine", "verl"]) == 0
    for line in (out / "verl.sh").read_text().splitlines():
        if " verl.trainer.main_ppo " not in line:
            continue
        log = line.split()[0].split("=", 1)[1]
        arm, seed = log.split("/runs/")[1].split("/")[:2]
        monkeypatch.setenv("VERL_FILE_LOGGER_PATH", log)
        logger = FileLogger("p", "e")
        val = "val-core/lmpo/chain_sum/reward/mean@1"
        logger.log({val: 0.3, "val-aux/lmpo/chain_sum/acc/mean@1": 0.3}, step=0)
        gain = (0.1 if arm == "dapo" else 0.0) + 0.01 * int(seed[-1])
        for step in (1, 2, 3):
            logger.log({"critic/score/mean": 0.5 + gain, "actor/entropy": 0.2,
                        "actor/pg_clipfrac": 0.01, "actor/lmpo/displacement": 0.05}, step=step)
        logger.log({val: 0.6 + gain, "val-aux/lmpo/chain_sum/acc/mean@1": 0.5 + gain}, step=3)
        logger.finish()
    rep = json.loads(report(out).with_suffix(".json").read_text())
    verdicts = {c["sentence"]: c["verdict"] for c in rep["claims"]}
    assert verdicts["s1"] == "holds"
    assert verdicts["s2"] == "not logged by verl: eval/accuracy_trained"
    grpo = rep["arms"]["grpo"]
    assert grpo["held-out accuracy, all tiers"]["mean"] == pytest.approx(0.51)
    assert rep["setup"]["finished"] == 6


def test_an_adaptive_kl_in_the_reward_reads_back_as_verls_adaptive_kl_ctrl():
    """kl.schedule adaptive_kl with kl.mode reward: verl's `algorithm.kl_ctrl` (type
    adaptive, target_kl, horizon, kl_coef), read back from verl's composed config and
    built by verl's own `get_kl_controller`."""
    from lmpo.config import load_config
    from lmpo.experiments.engines.verl_launch import kl_settings
    from lmpo.trainer.train_config import TrainConfig

    cfg = load_config(TrainConfig, "ppo_clip", [
        "kl.coef=0.03", "kl.schedule={name: adaptive_kl, hparams: {target_kl: 0.02}}"])
    settings = kl_settings(cfg)
    with initialize_config_dir(config_dir=CFG_DIR, version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=[
            f"{k}={hydra_value(v)}" for k, v in settings.items()])
    for key, want in settings.items():
        assert same(OmegaConf.select(composed, key), want), key
    ctrl = core_algos.get_kl_controller(composed.algorithm.kl_ctrl)
    assert isinstance(ctrl, core_algos.AdaptiveKLController)
    assert (ctrl.value, ctrl.target, ctrl.horizon) == (0.03, 0.02, 10000.0)


def test_the_optimal_token_baseline_reads_back_with_verls_sum_pi_squared_pass():
    """optimal_token_baseline maps to verl's own estimator and switches on the actor's
    sum_pi_squared (without it verl's trainer asserts); a changed hyper-parameter verl
    cannot read is refused."""
    from lmpo.config import load_config
    from lmpo.experiments.engines.verl_launch import advantage_settings
    from lmpo.trainer.train_config import TrainConfig

    settings = advantage_settings(load_config(TrainConfig, "otb"))
    with initialize_config_dir(config_dir=CFG_DIR, version_base=None):
        composed = compose(config_name="ppo_trainer", overrides=[
            f"{k}={hydra_value(v)}" for k, v in settings.items()])
    assert composed.algorithm.adv_estimator == "optimal_token_baseline"
    assert composed.actor_rollout_ref.actor.calculate_sum_pi_squared is True
    core_algos.get_adv_estimator_fn(composed.algorithm.adv_estimator)
    with pytest.raises(ValueError, match="handle_zero_tail"):
        advantage_settings(load_config(TrainConfig, "otb", [
            "advantage.hparams={handle_zero_tail: false}"]))
