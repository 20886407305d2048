"""One lmpo run through TRL's GRPOTrainer (`lmpo compare --engine trl` runs one process per
arm x seed): `python -m lmpo.integrations.trl_run --config CFG --run-dir DIR`.

The arm's resolved lmpo config becomes a `GRPOConfig` and an `LmpoGRPOTrainer` with the
arm's loss, hyper-parameters, aggregation and estimator: rollout.batch_size completions
per generation (group_size per prompt), split into optim.minibatches optimiser steps
(`steps_per_generation`), optim.epochs passes (`num_iterations`), so TRL's max_steps is
steps x minibatches x epochs; lr and warm-up, weight decay, grad clip, temperature,
response length, KL as a k3 loss term (TRL's beta), seed. The run directory has lmpo's
layout, so `lmpo report` reads it: `config.yaml`, `metrics.jsonl` (one row per rollout
batch, from TRL's log averaged over that batch's optimiser steps; TRL's names mapped to
lmpo's: reward -> reward/mean, entropy -> policy/entropy, grad_norm -> grad/norm, kl ->
kl/ref, num_tokens -> tokens/cumulative (TRL counts prompt and completion tokens), the
adapter's lmpo/<metric> -> loss/<metric> or adv/<metric>), `eval.json` (lmpo's held-out
evaluation before and after, on the same problems as an lmpo run) and TRL's own
`trainer_state.json` under `trl/`. A setting TRL's trainer cannot express is refused,
named (`trl_refusals`).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from lmpo import process_env
from lmpo.atomic import write_text
from lmpo.errors import ConfigError, LmpoError
from lmpo.experiments.engines.trl_mapping import lmpo_row, trl_refusals
from lmpo.locks import check_lease


def grpo_args(cfg, out: Path):
    from trl import GRPOConfig

    from lmpo.devices import resolve_device

    per_step = cfg.rollout.batch_size // cfg.optim.minibatches
    updates = cfg.optim.minibatches * cfg.optim.epochs
    return GRPOConfig(
        output_dir=str(out), per_device_train_batch_size=per_step,
        num_generations=cfg.rollout.group_size, steps_per_generation=cfg.optim.minibatches,
        num_iterations=cfg.optim.epochs, max_steps=cfg.steps * updates,
        max_completion_length=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature,
        learning_rate=cfg.optim.lr, warmup_steps=cfg.optim.warmup_steps,
        lr_scheduler_type="constant_with_warmup", weight_decay=cfg.optim.weight_decay,
        max_grad_norm=cfg.optim.grad_clip, beta=cfg.kl.coef, seed=cfg.seed,
        use_bias_correction_kl=cfg.kl.bias_correction,  # TRL's default is True; lmpo's False
        # kl.ref_sync_every counts lmpo steps, TRL's ref_model_sync_steps optimiser steps
        sync_ref_model=cfg.kl.ref_sync_every > 0, ref_model_mixup_alpha=cfg.kl.ref_sync_alpha,
        ref_model_sync_steps=max(cfg.kl.ref_sync_every, 1) * updates,
        off_policy_mask_threshold=cfg.loss.off_policy_mask_threshold,
        top_entropy_quantile=cfg.loss.top_entropy_quantile,
        mask_truncated_completions=cfg.loss.mask_truncated,
        **entropy_settings(cfg),
        logging_steps=updates, report_to="none", save_strategy="no",
        use_cpu=resolve_device(cfg.device).type == "cpu",  # `device`, as for an lmpo run
        gradient_accumulation_steps=1,
        bf16=cfg.optim.dtype == "bfloat16")  # TRL's autocast, as lmpo's optim.dtype


def entropy_settings(cfg) -> dict:
    """optim.entropy_coef and its adaptive_entropy schedule as GRPOConfig's keys."""
    out = {"entropy_coef": cfg.optim.entropy_coef}
    sched = cfg.optim.entropy_schedule
    if sched.name == "adaptive_entropy":
        from lmpo.trainer.schedules import schedule_settings

        full = schedule_settings(sched)
        out |= {"use_adaptive_entropy": True, "entropy_target": full["target"],
                "entropy_coef_delta": full["delta"], "entropy_coef_min": full["coef_min"],
                "entropy_coef_max": full["coef_max"]}
    return out


def run(cfg, run_dir: Path, *, resume: bool = False) -> dict:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from lmpo.config import save_config
    from lmpo.evaluate import evaluate, metrics_row
    from lmpo.integrations.trl import LmpoGRPOTrainer
    from lmpo.models import load_policy
    from lmpo.tasks import get_task
    from lmpo.tasks.heldout import heldout_split
    from lmpo.trainer.checkpoint import append_row
    from lmpo.trainer.runtime import Runtime
    from lmpo.trainer.setup import training_pool
    from lmpo.warmstart import resolve_policy

    refused = trl_refusals(cfg)
    if refused:
        raise ConfigError("TRL cannot run this config: " + "; ".join(refused))
    if (run_dir / "eval.json").exists():
        raise ConfigError(f"{run_dir} holds a finished run; choose a new --run-dir")
    if (run_dir / "metrics.jsonl").exists():  # TRL runs restart; a sweep passes --resume
        if not resume:
            raise ConfigError(f"{run_dir} already holds a run; pass --resume to restart it")
        (run_dir / "metrics.jsonl").unlink()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    policy, tok = load_policy(resolve_policy(cfg.policy, progress=False, seed=cfg.policy_seed))
    task = get_task(cfg.task, cfg.task_params or None)
    rt = Runtime.build(cfg, policy, tok, task, progress=False)
    heldout = heldout_split(task, cfg.log.eval_per_tier)
    pool = training_pool(task, cfg, heldout.prompts)
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(cfg, run_dir / "config.yaml")
    process_env.write(run_dir)

    def held_out(model) -> dict:
        return evaluate(model, tok, task, heldout.problems,
                        max_new_tokens=cfg.log.eval_max_new_tokens,
                        trained_tiers=cfg.rollout.clusters, temperature=cfg.log.eval_temperature,
                        samples=cfg.log.eval_samples, reward=rt.reward, encode=rt.encode,
                        eos_ids=rt.stop_ids, stream=cfg.log.eval_stream)

    def reward(prompts, completions, lmpo_index, **kwargs):
        scores, _ = rt.reward.score([pool[i] for i in lmpo_index], completions,
                                    where="training sample")
        return scores

    updates = cfg.optim.minibatches * cfg.optim.epochs

    class Rows(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                append_row(run_dir / "metrics.jsonl",
                           lmpo_row(logs, -(-state.global_step // updates)))

    before = held_out(policy)
    data = Dataset.from_dict({"prompt": [p.prompt for p in pool],
                              "lmpo_index": list(range(len(pool)))})
    trainer = LmpoGRPOTrainer(
        model=policy, reward_funcs=reward, args=grpo_args(cfg, run_dir / "trl"),
        train_dataset=data, processing_class=tok, lmpo_loss=cfg.loss.name,
        lmpo_loss_hparams=dict(cfg.loss.hparams), lmpo_agg=cfg.loss.agg,
        lmpo_advantage=cfg.advantage.name, lmpo_advantage_hparams=dict(cfg.advantage.hparams),
        ref_model=copy.deepcopy(policy) if cfg.kl.coef > 0 else None, callbacks=[Rows()])
    trainer.train()
    trainer.state.save_to_json(str(run_dir / "trl" / "trainer_state.json"))
    after = held_out(trainer.model)
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows[-1] |= metrics_row(after)
    check_lease(run_dir)  # a run moved to another machine has one writer
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = {"before": before, "after": after, "engine": "trl"}
    write_text(run_dir / "eval.json", json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    from lmpo.config import load_config
    from lmpo.trainer.train_config import TrainConfig

    parser = argparse.ArgumentParser(prog="python -m lmpo.integrations.trl_run")
    parser.add_argument("--config", required=True)
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--resume", action="store_true",
                        help="restart an unfinished run (TRL runs do not continue mid-run)")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    try:
        run(load_config(TrainConfig, args.config, args.overrides), Path(args.run_dir),
            resume=args.resume)
    except LmpoError as exc:
        print(f"trl_run: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
