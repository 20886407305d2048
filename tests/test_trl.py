"""lmpo inside TRL's GRPOTrainer (runs in the TRL environment: make test-trl)."""

from __future__ import annotations

import copy
import os

import pytest
import torch

trl = pytest.importorskip("trl", reason="TRL not installed: run `make test-trl`")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from lmpo.integrations.trl import LmpoGRPOTrainer  # noqa: E402
from lmpo.models import build_policy, build_tokenizer  # noqa: E402


def has_answer(completions, **kwargs):
    return [float("#" in c) for c in completions]


def length_share(completions, **kwargs):
    return [len(c) / 8 for c in completions]


def make_trainer(tmp_path, cls=LmpoGRPOTrainer, *, loss_type="dapo", beta=0.0, args_kw=None,
                 reward_funcs=has_answer, **kw):
    tok = build_tokenizer()
    model = build_policy("nano", tok, seed=0)
    data = Dataset.from_dict({"prompt": ["1+2=", "12+7=", "3-9=", "4*5=", "9+9=", "7-1="] * 4})
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=3, learning_rate=1e-4, logging_steps=1,
                      report_to="none", save_strategy="no", use_cpu=True, seed=0,
                      loss_type=loss_type, beta=beta, temperature=1.0, **(args_kw or {}))
    if cls is LmpoGRPOTrainer and beta:
        kw["ref_model"] = copy.deepcopy(model)
    return cls(model=model, reward_funcs=reward_funcs, args=args, train_dataset=data,
               processing_class=tok, **kw)


@pytest.mark.parametrize("loss,advantage", [("cegppo", "ebpo"), ("drpo", "dr_grpo")])
def test_three_training_steps_with_lmpo_loss_and_estimator(tmp_path, loss, advantage):
    trainer = make_trainer(tmp_path, lmpo_loss=loss, lmpo_advantage=advantage, beta=0.04)
    # no lmpo_agg: the method's own aggregation
    assert trainer.lmpo_agg == {"cegppo": "token-mean", "drpo": "seq-mean-token-sum-norm"}[loss]
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 3
    logged = {k for row in trainer.state.log_history for k in row}
    assert "lmpo/displacement" in logged and "lmpo/adv/zero_std_frac" in logged
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(),
                                                     strict=True))


def test_ppo_clip_token_mean_equals_trls_dapo_loss(tmp_path):
    trainer = make_trainer(tmp_path, lmpo_loss="ppo_clip",
                           lmpo_loss_hparams={"eps_low": 0.2, "eps_high": 0.2})
    g = torch.Generator().manual_seed(0)
    b, p, t = 16, 5, 12
    inputs = {
        "prompt_ids": torch.randint(4, 80, (b, p), generator=g),
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": torch.randint(4, 80, (b, t), generator=g),
        "completion_mask": (torch.rand(b, t, generator=g) < 0.8).long(),
        "advantages": torch.randn(b, generator=g),
    }
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum().float()
    with torch.no_grad():  # an old policy that differs, so that clipping is exercised
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), t)
    inputs["old_per_token_logps"] = logp + 0.5 * torch.randn(b, t, generator=g)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2  # as inside Trainer's accumulation loop
    ours = trainer._compute_loss(trainer.model, inputs)
    theirs = GRPOTrainer._compute_loss(trainer, trainer.model, inputs)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)


def test_grpo_configs_clip_settings_reach_the_losses_that_declare_them(tmp_path):
    """TRL's epsilon / epsilon_high feed a PPO-style clip's eps_low / eps_high unless
    lmpo_loss_hparams sets them; a loss that declares no TRL key keeps lmpo's defaults."""
    t = make_trainer(tmp_path, lmpo_loss="ppo_clip", args_kw={"epsilon_high": 0.28})
    assert t.lmpo_loss_hparams == {"eps_low": 0.2, "eps_high": 0.28}
    t = make_trainer(tmp_path, lmpo_loss="cegppo", args_kw={"epsilon": 0.1},
                     lmpo_loss_hparams={"eps_low": 0.3})
    assert t.lmpo_loss_hparams == {"eps_low": 0.3, "eps_high": 0.1}
    t = make_trainer(tmp_path, lmpo_loss="gspo", args_kw={"epsilon_high": 0.28})
    assert t.lmpo_loss_hparams == {}


def test_grpo_configs_scale_rewards_reaches_lmpos_grpo(tmp_path):
    """TRL's scale_rewards names lmpo grpo's scale ("group", "batch", "none"; TRL turns
    True / False into group / none); lmpo_advantage_hparams wins."""
    for scale in ("batch", "none", True):
        t = make_trainer(tmp_path, lmpo_loss="ppo_clip", lmpo_advantage="grpo",
                         args_kw={"scale_rewards": scale})
        assert t.lmpo_estimator.scale == {True: "group"}.get(scale, scale)
    t = make_trainer(tmp_path, lmpo_loss="ppo_clip", lmpo_advantage="grpo",
                     lmpo_advantage_hparams={"scale": "group"}, args_kw={"scale_rewards": "none"})
    assert t.lmpo_estimator.scale == "group"


def test_gdpo_equals_trls_normalize_then_sum(tmp_path, monkeypatch):
    """lmpo's gdpo estimator on TRL's per-function rewards and weights gives the advantages
    GRPOTrainer computes itself with multi_objective_aggregation="normalize_then_sum" (on
    the same generation batch: TRL's are recorded before the adapter replaces them)."""
    seen = {"trl": [], "lmpo": []}
    for cls, key in ((GRPOTrainer, "trl"), (LmpoGRPOTrainer, "lmpo")):
        original = cls._generate_and_score_completions

        def record(self, inputs, _original=original, _key=key):
            out = _original(self, inputs)
            seen[_key].append(out["advantages"].clone())
            return out
        monkeypatch.setattr(cls, "_generate_and_score_completions", record)
    args_kw = {"multi_objective_aggregation": "normalize_then_sum",
               "reward_weights": [1.0, -0.5]}
    make_trainer(tmp_path, lmpo_advantage="gdpo", args_kw=args_kw,
                 reward_funcs=[has_answer, length_share]).train()
    assert len(seen["lmpo"]) == len(seen["trl"]) >= 3
    for ours, theirs in zip(seen["lmpo"], seen["trl"], strict=True):
        assert theirs.abs().max() > 0.1  # the rewards varied: the check is not 0 == 0
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="lmpo_advantage='gdpo'"):
        make_trainer(tmp_path, lmpo_advantage="grpo", args_kw=args_kw,
                     reward_funcs=[has_answer, length_share])


def fixed_inputs(trainer, seed=0, b=16, p=5, t=12):
    """A batch with an old policy that differs from the current one (ratios away from 1)."""
    g = torch.Generator().manual_seed(seed)
    inputs = {
        "prompt_ids": torch.randint(4, 80, (b, p), generator=g),
        "prompt_mask": torch.ones(b, p, dtype=torch.long),
        "completion_ids": torch.randint(4, 80, (b, t), generator=g),
        "completion_mask": (torch.rand(b, t, generator=g) < 0.8).long(),
        "advantages": torch.randn(b, generator=g),
    }
    inputs["completion_mask"][:, 0] = 1  # no empty completion (TRL's means count them)
    # as if the generation batch held three such micro-batches: "dapo"'s normaliser (the
    # generation batch's tokens) then differs from "bnpo"'s (this micro-batch's)
    inputs["num_items_in_batch"] = 3 * inputs["completion_mask"].sum().float()
    with torch.no_grad():
        logp, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), t)
    inputs["old_per_token_logps"] = logp + 0.3 * torch.randn(b, t, generator=g)
    return inputs


# TRL loss_type, lmpo loss, GRPOConfig settings (each loss reads its own from them)
TRL_TYPES = [("bnpo", "bnpo", {"epsilon": 0.1, "epsilon_high": 0.3}),
             ("sapo", "sapo", {"sapo_temperature_pos": 1.5, "sapo_temperature_neg": 2.5}),
             ("luspo", "luspo", {"importance_sampling_level": "sequence", "epsilon": 0.05,
                                 "epsilon_high": 0.08}),
             ("vespo", "vespo", {"vespo_k_pos": 1.5, "vespo_lambda_pos": 2.0}),
             # GRPOConfig.delta, TRL's two-sided clip, in each loss type that applies it
             ("dapo", "ppo_clip", {"epsilon_high": 0.28, "delta": 1.3}),
             ("bnpo", "bnpo", {"epsilon": 0.1, "epsilon_high": 0.3, "delta": 1.25}),
             ("luspo", "luspo", {"importance_sampling_level": "sequence", "epsilon": 0.05,
                                 "epsilon_high": 0.08, "delta": 1.02}),
             # DeepSeek-V3.2's OPSM (off_policy_mask_threshold), for any loss type
             ("dapo", "ppo_clip", {"off_policy_mask_threshold": 0.02}),
             ("sapo", "sapo", {"off_policy_mask_threshold": 0.01}),
             # top_entropy_quantile ("80/20"): TRL's own per-micro-batch selection
             ("dapo", "ppo_clip", {"top_entropy_quantile": 0.2})]


@pytest.mark.parametrize("loss_type, loss, args_kw", TRL_TYPES, ids=lambda x: str(x)[:12])
def test_trl_loss_types_equal_trls_own_loss(tmp_path, loss_type, loss, args_kw):
    """lmpo's loss through LmpoGRPOTrainer (its default aggregation, TRL's settings read
    from GRPOConfig) against GRPOTrainer's own computation of that loss_type."""
    trainer = make_trainer(tmp_path, loss_type=loss_type, lmpo_loss=loss, args_kw=args_kw)
    inputs = fixed_inputs(trainer)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    ours = trainer._compute_loss(trainer.model, inputs)
    theirs = GRPOTrainer._compute_loss(trainer, trainer.model, inputs)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    (g_ours,) = torch.autograd.grad(trainer._compute_loss(trainer.model, inputs),
                                    next(trainer.model.parameters()))
    (g_theirs,) = torch.autograd.grad(GRPOTrainer._compute_loss(trainer, trainer.model, inputs),
                                      next(trainer.model.parameters()))
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-7)


def tiny_sweep_base(policy) -> dict:
    """An experiment's base for tiny TRL runs of a few seconds each."""
    return {"policy": str(policy),
            "rollout": {"batch_size": 8, "group_size": 4, "pool_size": 32, "max_new_tokens": 8},
            "optim": {"minibatches": 2},
            "log": {"eval_per_tier": 4, "eval_max_new_tokens": 8, "eval_samples": 1,
                    "eval_temperature": 0.0, "tensorboard": False}}


def test_a_comparison_runs_on_trl_and_lmpo_report_reads_it(tmp_path, tiny_policy_dir):
    """`lmpo compare --engine trl`: a 2-arm x 2-seed x 3-step sweep through GRPOTrainer (one
    process per run), in lmpo's run-directory layout, and its report; an arm TRL cannot
    express is refused with the setting named while the others run."""
    import json

    import yaml

    from lmpo.cli import main
    from lmpo.experiments.report.write import report

    base = tiny_sweep_base(tiny_policy_dir) | {"threads": 1}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "base": base, "arms": {"grpo": {"preset": "grpo"}, "cegppo": {"preset": "cegppo"},
                               "espo": {"preset": "espo"}},
        "seeds": [0, 1], "steps": 3, "differs_in": ["loss", "controller", "advantage", "kl",
                                                      "critic", "rollout.group_size"],
        "claims": [{"kind": "direction", "metric": "reward/mean", "arms": ["cegppo", "grpo"],
                    "differs_in": ["loss"], "expect": "greater", "sentence": "a smoke claim"}]}))
    out = tmp_path / "sweep"
    assert main(["compare", "--config", str(path), "--out", str(out), "--engine", "trl"]) == 0
    for arm in ("grpo", "cegppo"):
        for seed in (0, 1):
            run_dir = out / "runs" / arm / f"seed{seed}"
            rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
            assert [r["step"] for r in rows] == [1, 2, 3]
            assert "reward/mean" in rows[0] and "eval/accuracy_mean" in rows[-1]
            assert "adv/zero_std_frac" in rows[0] and "loss/displacement" in rows[0]
            assert json.loads((run_dir / "eval.json").read_text())["engine"] == "trl"
            state = json.loads((run_dir / "trl" / "trainer_state.json").read_text())
            assert state["global_step"] == 3 * 2  # steps x minibatches (x epochs, 1)
    assert not (out / "runs" / "espo" / "seed0" / "metrics.jsonl").exists()
    rep = report(out)
    text = rep.read_text()
    assert "2 seeds" in text or "seeds [0, 1]" in text
    assert "4 of 6 runs finished" in text
    # a TRL run that kept only TRL's own trainer_state.json reads the same training rows;
    # the held-out evaluation TRL does not log is named
    run_dir = out / "runs" / "cegppo" / "seed1"
    logged = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "eval.json").unlink()
    from lmpo.experiments.report.write import collect

    again = collect(out)["runs"][("cegppo", 1)]
    assert again["engine"] == "trl" and again["finished"]
    assert [r["reward/mean"] for r in again["rows"]] == pytest.approx(
        [r["reward/mean"] for r in logged])


def loss_and_logp_grad(trainer, compute, inputs):
    """(loss, d loss / d per-token log-prob): the log-probs the forward returns made a
    leaf, so that the comparison is of the loss, not of float32 rounding in the network's
    backward (the two add their terms in different orders)."""
    forward = type(trainer)._get_per_token_logps_and_entropies
    leaf = {}

    def as_leaf(self, *args, **kwargs):
        logp, entropies, aux = forward(self, *args, **kwargs)
        leaf["logp"] = logp.detach().clone().requires_grad_(True)
        return leaf["logp"], entropies, aux

    trainer._get_per_token_logps_and_entropies = as_leaf.__get__(trainer)
    try:
        loss = compute(trainer, trainer.model, inputs)
    finally:
        del trainer._get_per_token_logps_and_entropies
    return loss, torch.autograd.grad(loss, leaf["logp"])[0]


@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_the_kl_term_equals_trls_with_and_without_its_bias_correction(tmp_path, bias_correction,
                                                                     level):
    """beta > 0: TRL's k3 KL term, times its differentiable importance ratio (token or
    sequence level) when use_bias_correction_kl (TRL's default) is on; values and
    gradients against GRPOTrainer's own loss on the same batch and reference."""
    loss = "luspo" if level == "sequence" else "dapo"  # a loss type with that ratio
    trainer = make_trainer(tmp_path, loss_type=loss, beta=0.3,
                           lmpo_loss="luspo" if level == "sequence" else "ppo_clip",
                           args_kw={"use_bias_correction_kl": bias_correction,
                                    "importance_sampling_level": level})
    inputs = fixed_inputs(trainer)
    g = torch.Generator().manual_seed(5)
    inputs["ref_per_token_logps"] = inputs["old_per_token_logps"] + \
        0.3 * torch.randn(inputs["old_per_token_logps"].shape, generator=g)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    ours, g_ours = loss_and_logp_grad(trainer, LmpoGRPOTrainer._compute_loss, inputs)
    theirs, g_theirs = loss_and_logp_grad(trainer, GRPOTrainer._compute_loss, inputs)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(g_ours, g_theirs, rtol=1e-5, atol=1e-8)
    if bias_correction:  # the correction changes the gradient: the test can tell
        trainer.args.use_bias_correction_kl = False
        _, g_plain = loss_and_logp_grad(trainer, LmpoGRPOTrainer._compute_loss, inputs)
        assert (g_plain - g_ours).abs().max() > 1e-4


def test_the_off_policy_mask_acts_on_the_compared_batch(tmp_path):
    """The OPSM cases above compare a mask that removes tokens, not an all-ones one."""
    trainer = make_trainer(tmp_path, lmpo_loss="ppo_clip",
                           args_kw={"off_policy_mask_threshold": 0.02})
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    trainer._compute_loss(trainer.model, fixed_inputs(trainer))
    assert trainer._metrics["train"]["lmpo/opsm/masked_frac"][-1] > 0.05


def test_entropy_and_length_settings_become_trls_own(tmp_path):
    """optim.entropy_schedule adaptive_entropy and loss.mask_truncated reach GRPOConfig as
    TRL's own keys, which TRL validates when it builds the config."""
    from lmpo.config import load_config
    from lmpo.integrations.trl_run import grpo_args
    from lmpo.trainer.train_config import TrainConfig

    cfg = load_config(TrainConfig, "grpo", [
        "loss.agg=token-mean", "optim.entropy_coef=0.02", "optim.entropy_schedule={name: "
        "adaptive_entropy, hparams: {target: 0.7, delta: 0.01, coef_max: 0.1}}"])
    args = grpo_args(cfg, tmp_path)
    assert (args.entropy_coef, args.use_adaptive_entropy, args.entropy_target,
            args.entropy_coef_delta, args.entropy_coef_min, args.entropy_coef_max) == \
        (0.02, True, 0.7, 0.01, 0.0, 0.1)
    assert grpo_args(load_config(TrainConfig, "grpo"), tmp_path).use_adaptive_entropy is False
    # loss.mask_truncated is TRL's own mask_truncated_completions
    assert grpo_args(load_config(TrainConfig, "grpo", ["loss.mask_truncated=true"]),
                     tmp_path).mask_truncated_completions is True


def test_the_reference_sync_is_trls_own(tmp_path):
    """kl.ref_sync_every / ref_sync_alpha: GRPOConfig's sync_ref_model keys (its steps in
    optimiser steps), and lmpo's mix equal to TRL's SyncRefModelCallback, bit for bit."""
    import torch
    from trl.trainer.callbacks import SyncRefModelCallback

    from lmpo.config import load_config
    from lmpo.integrations.trl_run import grpo_args
    from lmpo.trainer.ref_sync import ReferenceSync
    from lmpo.trainer.train_config import TrainConfig

    cfg = load_config(TrainConfig, "grpo", ["kl.coef=0.04", "kl.ref_sync_every=3",
                                            "kl.ref_sync_alpha=0.3", "optim.minibatches=2"])
    args = grpo_args(cfg, tmp_path)
    assert (args.sync_ref_model, args.ref_model_sync_steps, args.ref_model_mixup_alpha) == \
        (True, 6, 0.3)
    assert grpo_args(load_config(TrainConfig, "grpo"), tmp_path).sync_ref_model is False
    torch.manual_seed(0)
    policy, ref = torch.nn.Linear(4, 3), torch.nn.Linear(4, 3)
    theirs = torch.nn.Linear(4, 3)
    theirs.load_state_dict(ref.state_dict())
    ReferenceSync(ref, policy, every=1, alpha=0.3).step_end(1)
    SyncRefModelCallback._sync_target_model(policy, theirs, 0.3)  # without deepspeed
    assert all(torch.equal(a, b) for a, b in zip(ref.parameters(), theirs.parameters(),
                                                 strict=True))


def test_the_readmes_trl_quick_start_runs_as_pasted(tmp_path, monkeypatch):
    """README's TRL block, executed literally in an empty folder: two GRPO steps with the
    DRPO loss (its delta from lmpo_loss_hparams) and Dr. GRPO's advantages."""
    from pathlib import Path

    from tests.doc_blocks import fenced_blocks

    readme = Path(__file__).resolve().parents[1] / "README.md"
    code = next(c for lang, _, c in fenced_blocks(readme)
                if lang == "python" and "LmpoGRPOTrainer" in c)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, str(readme), "exec"), scope)
    trainer = scope["trainer"]
    assert trainer.state.global_step == 2 and trainer.lmpo_loss == "drpo"
    assert trainer.lmpo_loss_hparams == {"delta": 10.0}
    assert (tmp_path / "runs" / "trl-drpo").is_dir()
