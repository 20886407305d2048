"""`lmpo compare --engine verl` in the core environment: what lmpo's settings become in
verl's terms, what is refused and why, and the command's exit codes. (That verl's own
config accepts every mapped setting is tests/test_verl_launch.py, in verl's environment.)"""

from __future__ import annotations

import yaml

from lmpo.cli import main
from lmpo.config import load_config
from lmpo.experiments.engines.verl_launch import refusals, verl_settings
from lmpo.trainer.train_config import TrainConfig

A = "actor_rollout_ref.actor"


def test_the_group_testbed_in_verls_terms():
    s = verl_settings(load_config(TrainConfig, "dapo", ["seed=7"]))
    assert s["data.train_batch_size"] == 8 and s["actor_rollout_ref.rollout.n"] == 8
    assert s[f"{A}.ppo_mini_batch_size"] == 2  # 8 prompts over 4 minibatches
    assert s[f"{A}.ppo_epochs"] == 1 and s[f"{A}.optim.lr"] == 2e-5
    assert s[f"{A}.policy_loss.loss_mode"] == "lmpo_ppo_clip"
    assert s[f"{A}.clip_ratio_high"] == 0.28 == s[f"+{A}.policy_loss.hparams.eps_high"]
    assert s[f"{A}.loss_agg_mode"] == "token-mean"
    assert s["algorithm.filter_groups.enable"] is True
    assert s["algorithm.adv_estimator"] == "lmpo_grpo"
    assert s[f"{A}.use_kl_loss"] is False and s["algorithm.use_kl_in_reward"] is False
    assert s["data.seed"] == s["actor_rollout_ref.rollout.seed"] == 7
    assert s["data.max_response_length"] == 24


def test_kl_where_it_applies_and_gae():
    s = verl_settings(load_config(TrainConfig, "grpo", ["kl.coef=0.04", "kl.kind=k3"]))
    assert (s[f"{A}.use_kl_loss"], s[f"{A}.kl_loss_coef"], s[f"{A}.kl_loss_type"]) == \
        (True, 0.04, "low_var_kl")
    cfg = load_config(TrainConfig, "ppo_clip", ["critic.init=random"])
    s = verl_settings(cfg)
    assert s["algorithm.adv_estimator"] == "gae" and s["algorithm.lam"] == 0.95
    assert s["algorithm.use_kl_in_reward"] is True and s["algorithm.kl_penalty"] == "kl"
    assert s["algorithm.kl_ctrl.kl_coef"] == 0.05 and s["critic.optim.lr"] == 1e-3
    assert refusals(cfg) == []


def test_what_verl_cannot_express_is_named():
    why = refusals(load_config(TrainConfig, "espo"))
    assert any(w.startswith("controller.name=espo") for w in why)
    assert any(w.startswith("critic.init=zero") for w in why)
    why = refusals(load_config(TrainConfig, "ebpo", ["rollout.sampler=easy_to_hard",
                                                     "rollout.staleness=2"]))
    assert {w.split(":")[0] for w in why} == {"rollout.sampler=easy_to_hard",
                                              "rollout.staleness=2"}


def test_coefficient_schedules_map_where_the_engines_have_them():
    """verl: an adaptive KL in the reward is its adaptive kl_ctrl; in the loss, and an
    adaptive entropy bonus, it has none. TRL: adaptive entropy is use_adaptive_entropy
    (its bonus is a token mean: other aggregations are refused); its beta is fixed."""
    from lmpo.experiments.engines.trl_mapping import trl_refusals
    from lmpo.integrations.trl_run import entropy_settings

    adaptive = "kl.schedule={name: adaptive_kl, hparams: {horizon: 500}}"
    s = verl_settings(load_config(TrainConfig, "ppo_clip", [adaptive]))
    assert (s["algorithm.kl_ctrl.type"], s["algorithm.kl_ctrl.target_kl"],
            s["algorithm.kl_ctrl.horizon"]) == ("adaptive", 0.1, 500)
    why = refusals(load_config(TrainConfig, "grpo", [
        "kl.coef=0.1", adaptive, "optim.entropy_schedule={name: adaptive_entropy}"]))
    assert {w.split(":")[0] for w in why} == {
        "kl.schedule=adaptive_kl with kl.mode=loss", "optim.entropy_schedule=adaptive_entropy"}
    ent = load_config(TrainConfig, "grpo", [
        "optim.entropy_coef=0.01", "loss.agg=token-mean",
        "optim.entropy_schedule={name: adaptive_entropy, hparams: {target: 1.5}}"])
    assert trl_refusals(ent) == []
    assert entropy_settings(ent) == {
        "entropy_coef": 0.01, "use_adaptive_entropy": True, "entropy_target": 1.5,
        "entropy_coef_delta": 0.005, "entropy_coef_min": 0.0, "entropy_coef_max": 1.0}
    why = trl_refusals(load_config(TrainConfig, "grpo", ["optim.entropy_coef=0.01", adaptive,
                                                         "kl.coef=0.1"]))
    assert {w.split(":")[0] for w in why} == {
        "kl.schedule=adaptive_kl", "optim.entropy_coef with loss.agg=seq-mean-token-mean"}


def test_an_aggregation_verls_own_function_ignores_is_refused():
    """verl's sapo always aggregates seq-mean-token-mean and its geo_mean averages rows: an
    arm asking another mode would train something else in verl; the presets' own pass
    (a bias-corrected KL is refused too: verl's KL loss has none)."""
    assert refusals(load_config(TrainConfig, "sapo")) == []
    assert refusals(load_config(TrainConfig, "geo_mean")) == []
    why = refusals(load_config(TrainConfig, "sapo", ["loss.agg=token-mean", "kl.coef=0.1",
                                                     "kl.bias_correction=true"]))
    assert {w.split(":")[0] for w in why} == {"loss.agg=token-mean", "kl.bias_correction=True"}
    why = refusals(load_config(TrainConfig, "geo_mean", ["loss.agg=token-mean"]))
    assert [w.split(":")[0] for w in why] == ["loss.agg=token-mean"]


def experiment(tmp_path, arms):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"arms": arms, "seeds": [0, 1], "steps": 5,
                                    "differs_in": ["loss", "controller", "critic"]}))
    return str(path)


def test_the_command_prints_one_launch_per_arm_and_seed(tmp_path, capsys):
    path = experiment(tmp_path, {"grpo": {"preset": "grpo"}, "espo": {"preset": "espo"}})
    assert main(["compare", "--config", path, "--out", str(tmp_path / "o"), "--engine",
                 "verl"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    launches = [x for x in lines if " python -m verl.trainer.main_ppo " in x]
    assert all(x.startswith(f"VERL_FILE_LOGGER_PATH={tmp_path / 'o'}/runs/grpo/seed")
               for x in launches)  # verl's file logger writes into lmpo's run directory
    assert len(launches) == 2 and all("trainer.total_training_steps=5" in x for x in launches)
    assert len([x for x in lines if x.startswith("lmpo export-data")]) == 2  # one per seed
    assert [x for x in lines if x.startswith("# refused: arm espo: controller.name=espo")]
    assert (tmp_path / "o" / "verl.sh").read_text().count("main_ppo") == 2
    assert main(["compare", "--config", path, "--out", str(tmp_path / "o"), "--engine",
                 "verl", "--strict"]) == 1


def test_no_arm_that_maps_is_an_error(tmp_path, capsys):
    path = experiment(tmp_path, {"espo": {"preset": "espo"}})
    assert main(["compare", "--config", path, "--out", str(tmp_path / "o"), "--engine",
                 "verl"]) == 1
    assert "no arm maps" in capsys.readouterr().err


def test_the_printed_export_line_writes_the_data_the_launch_reads(tmp_path, capsys):
    path = experiment(tmp_path, {"grpo": {"preset": "grpo"}})
    main(["compare", "--config", path, "--out", str(tmp_path / "o"), "--engine", "verl"])
    lines = capsys.readouterr().out.strip().splitlines()
    export = lines[0].replace("$DATA", str(tmp_path / "data")).split()
    assert export[:2] == ["lmpo", "export-data"]
    assert main(export[1:]) == 0
    train_file = next(t for t in lines[2].split() if t.startswith("data.train_files="))
    assert (tmp_path / "data" / train_file.split("$DATA/")[1]).exists()


def test_trl_refusals_name_the_setting_and_need_trl_to_run(tmp_path, capsys):
    from lmpo.experiments.engines.trl_mapping import trl_refusals

    assert trl_refusals(load_config(TrainConfig, "grpo")) == []
    why = {w.split(":")[0] for w in trl_refusals(load_config(TrainConfig, "dapo"))}
    assert why == {"rollout.dynamic_sampling=True"}
    assert any(w.startswith("advantage.name=gae") for w in
               trl_refusals(load_config(TrainConfig, "ppo_clip")))
    import importlib.util

    if importlib.util.find_spec("trl") is None:  # the core environment
        path = experiment(tmp_path, {"grpo": {"preset": "grpo"}})
        assert main(["compare", "--config", path, "--out", str(tmp_path / "t"), "--engine",
                     "trl"]) != 0
        assert "TRL installed" in capsys.readouterr().err


def test_list_without_out_prints_and_writes_nothing(tmp_path, capsys):
    path = experiment(tmp_path, {"grpo": {"preset": "grpo"}})
    assert main(["compare", "--engine", "verl", "--config", path, "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [x for x in lines if x.startswith("python -m verl.trainer.main_ppo ")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]
    assert main(["compare", "--config", path]) != 0  # lmpo's own sweep needs its directory
    assert "--out is required" in capsys.readouterr().err


def test_estimators_that_need_the_trainers_own_passes_are_refused_by_trl():
    """TRL's GRPOTrainer passes its estimator neither the path statistics (OTB) nor greedy
    baselines (ReMax): both are refused by name; verl maps OTB to its own estimator."""
    from lmpo.experiments.engines.trl_mapping import trl_refusals

    for preset in ("otb", "remax"):
        why = trl_refusals(load_config(TrainConfig, preset))
        name = load_config(TrainConfig, preset).advantage.name
        assert [w.split(":")[0] for w in why] == [f"advantage.name={name}"]
    assert verl_settings(load_config(TrainConfig, "otb"))[
        "actor_rollout_ref.actor.calculate_sum_pi_squared"] is True


def test_a_verl_sweep_builds_each_runs_config_once(tmp_path, capsys, monkeypatch):
    """Printing, writing the compare directory and the launches read one plan: every arm x
    seed's config is built once (it was built three times), and the configs written are
    the ones the launches were made from."""
    import lmpo.experiments.design.spec as spec

    built = []
    real = spec.arm_config
    monkeypatch.setattr(spec, "arm_config", lambda exp, arm, seed: built.append(
        (arm.name, seed)) or real(exp, arm, seed))
    path = experiment(tmp_path, {"grpo": {"preset": "grpo"}, "dapo": {"preset": "dapo"}})
    assert main(["compare", "--config", path, "--out", str(tmp_path / "o"), "--engine",
                 "verl"]) == 0
    assert sorted(built) == sorted(set(built)) and len(built) == 4  # 2 arms x 2 seeds
    written = yaml.safe_load((tmp_path / "o" / "configs" / "dapo-seed1.yaml").read_text())
    launch = next(x for x in capsys.readouterr().out.splitlines()
                  if "experiment_name=dapo-seed1" in x)
    assert f"data.seed={written['seed']}" in launch
