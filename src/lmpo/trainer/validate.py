"""`TrainConfig.validate`: every name resolves and every number is in range before any
work, each failure one line that names the key. The checks come in groups, one function
each; the parts' own hyper-parameters are checked by building them (`lmpo.trainer.parts`).
"""

from __future__ import annotations

import dataclasses
import math

from lmpo.advantages import advantage_meta, list_advantages
from lmpo.config import ConfigError
from lmpo.losses import AGG_MODES, KL_KINDS
from lmpo.registry import nearest
from lmpo.rewards import SCALES, build_reward
from lmpo.rewards.multi import fn_name
from lmpo.rollout import ROLLOUT_DTYPES, list_controllers, list_corrections
from lmpo.tasks import SAMPLER_KINDS, TASKS
from lmpo.trainer.greedy import wants_greedy
from lmpo.trainer.parts import build_controller_of, build_estimator, build_parts
from lmpo.trainer.shadow import build_comparators
from lmpo.trainer.trackers import check_wandb
from lmpo.trainer.update import UPDATE_DTYPES
from lmpo.user_modules import import_user_modules

PROMPT_FORMATS = ("auto", "raw", "chat")
DEVICES = ("auto", "cpu", "cuda")
CRITIC_INITS = ("zero", "random")


def validate(cfg) -> None:
    """Raise ConfigError on the first failed check of `cfg` (a TrainConfig)."""
    import_user_modules(cfg.imports)  # your own parts register before their names resolve
    check_finite(cfg)
    check_names(cfg)
    for ok, msg in [*counts(cfg), *rollout_checks(cfg), *optim_checks(cfg),
                    *setting_checks(cfg)]:
        if not ok:
            raise ConfigError(msg)

    for spec in (cfg.reward.fn, *cfg.reward.extra):  # an unknown name or function fails now
        build_reward(spec, None)
    check_parts(cfg)

    check_wandb(cfg.log.wandb)


def check_finite(section, prefix: str = "") -> None:
    """Every number in the config's own fields is finite (NaN and inf pass no range check:
    `lr > 0` holds for inf). The parts' hyper-parameters have their own domains."""
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            check_finite(value, f"{prefix}{f.name}.")
        elif isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{prefix}{f.name} must be a finite number, got {value}")


def check_names(cfg) -> None:
    kind = cfg.rollout.correction.kind
    for key, name, names in (("advantage", cfg.advantage.name, list_advantages()),
                             ("controller", cfg.controller.name, list_controllers()),
                             *([("rollout.correction.kind", kind, list_corrections())]
                               if kind is not None else [])):
        if name not in names:
            raise ConfigError(f"unknown {key} {name!r}{nearest(name, names)}; valid: "
                              f"{', '.join(names)}")


def counts(cfg) -> list[tuple[bool, str]]:
    r, o, lg = cfg.rollout, cfg.optim, cfg.log
    positive = {"steps": cfg.steps, "threads": cfg.threads, "max_nonfinite": cfg.max_nonfinite,
                "rollout.batch_size": r.batch_size, "rollout.group_size": r.group_size,
                "rollout.max_new_tokens": r.max_new_tokens, "rollout.pool_size": r.pool_size,
                "rollout.max_gen_batches": r.max_gen_batches, "optim.epochs": o.epochs,
                "optim.minibatches": o.minibatches, "optim.micro_batch_size": o.micro_batch_size,
                "log.eval_every": lg.eval_every, "log.eval_per_tier": lg.eval_per_tier,
                "log.eval_max_new_tokens": lg.eval_max_new_tokens,
                "log.eval_samples": lg.eval_samples, "log.checkpoint_every": lg.checkpoint_every,
                "log.policy_kl_every": lg.policy_kl_every,
                "reward.micro_batch_size": cfg.reward.micro_batch_size}
    is_int = {k: isinstance(v, int) and not isinstance(v, bool) for k, v in positive.items()}
    return [(is_int[k] and v >= 1, f"{k} must be >= 1, got {v!r}"
             + ("" if is_int[k] else " (an int)")) for k, v in positive.items()]


def rollout_checks(cfg) -> list[tuple[bool, str]]:
    r = cfg.rollout
    return [
        (r.batch_size % max(r.group_size, 1) == 0,
         f"rollout.batch_size {r.batch_size} is not divisible by rollout.group_size "
         f"{r.group_size}"),
        (r.temperature > 0, f"rollout.temperature must be > 0, got {r.temperature}"),
        (not r.dynamic_sampling or not cfg.actor_critic,
         "rollout.dynamic_sampling drops groups whose rewards are all equal: it needs the "
         "group family (an estimator without a critic)"),
        (r.max_gen_batches == 1 or r.dynamic_sampling,
         f"rollout.max_gen_batches {r.max_gen_batches} refills dynamic sampling's batch: it "
         "needs rollout.dynamic_sampling and the group family"),
        (r.sampler in SAMPLER_KINDS,
         f"rollout.sampler {r.sampler!r} unknown; valid: {', '.join(SAMPLER_KINDS)}"),
        (r.dtype in ROLLOUT_DTYPES,
         f"rollout.dtype {r.dtype!r} unknown; valid: {', '.join(ROLLOUT_DTYPES)}"),
        (r.old_logp in ("rollout", "recompute"),
         f"rollout.old_logp must be rollout|recompute, got {r.old_logp!r}"),
        (r.staleness >= 0, f"rollout.staleness must be >= 0, got {r.staleness}"),
        (r.dtype not in ("fp8_e4m3", "fp4_e2m1") or cfg.lora.r == 0,
         f"rollout.dtype {r.dtype} quantises the decoder's linear layers: not with LoRA "
         "adapters (lora.r > 0); use bfloat16 or float16"),
        (r.correction.kind is not None or not r.correction.hparams,
         f"rollout.correction.hparams {r.correction.hparams} need a rollout.correction.kind"),
    ]


def optim_checks(cfg) -> list[tuple[bool, str]]:
    o, kl = cfg.optim, cfg.kl
    return [
        (o.lr > 0, f"optim.lr must be > 0, got {o.lr}"),
        (o.grad_clip > 0, f"optim.grad_clip must be > 0, got {o.grad_clip}"),
        (o.weight_decay >= 0, f"optim.weight_decay must be >= 0, got {o.weight_decay}"),
        (0 < cfg.loss.top_entropy_quantile <= 1,
         f"loss.top_entropy_quantile must be in (0, 1], got {cfg.loss.top_entropy_quantile}"),
        (o.dtype in UPDATE_DTYPES,
         f"optim.dtype {o.dtype!r} unknown; valid: {', '.join(UPDATE_DTYPES)}"),
        (cfg.critic.lr > 0, f"critic.lr must be > 0, got {cfg.critic.lr}"),
        (cfg.critic.value_coef > 0 or not cfg.actor_critic,
         f"critic.value_coef must be > 0 for the actor-critic family (the critic would not "
         f"learn), got {cfg.critic.value_coef}"),
        (cfg.rollout.batch_size % o.minibatches == 0,
         f"rollout.batch_size {cfg.rollout.batch_size} is not divisible by optim.minibatches "
         f"{o.minibatches}"),
        (cfg.loss.agg is None or cfg.loss.agg in AGG_MODES,
         f"loss.agg {cfg.loss.agg!r} unknown; valid: {', '.join(AGG_MODES)}"),
        (kl.kind in KL_KINDS, f"kl.kind {kl.kind!r} unknown; valid: {KL_KINDS}"),
        (kl.mode in ("loss", "reward"), f"kl.mode must be loss|reward, got {kl.mode!r}"),
        (kl.mode == "loss" or cfg.actor_critic,
         "kl.mode=reward needs the actor-critic family (an estimator that trains a critic)"),
        (kl.coef >= 0, f"kl.coef must be >= 0, got {kl.coef}"),
        (cfg.loss.off_policy_mask_threshold is None or cfg.loss.off_policy_mask_threshold >= 0,
         f"loss.off_policy_mask_threshold must be >= 0 or null, got "
         f"{cfg.loss.off_policy_mask_threshold}"),
        (not kl.bias_correction or kl.mode == "loss",
         "kl.bias_correction weights a KL loss term: it needs kl.mode=loss"),
        (isinstance(cfg.lora.r, int) and not isinstance(cfg.lora.r, bool) and cfg.lora.r >= 0
         and cfg.lora.alpha > 0 and 0 <= cfg.lora.dropout < 1,
         f"lora needs an int r >= 0, alpha > 0 and 0 <= dropout < 1, got {cfg.lora}"),
    ]


def setting_checks(cfg) -> list[tuple[bool, str]]:
    lg = cfg.log
    return [
        (lg.eval_temperature >= 0,
         f"log.eval_temperature must be >= 0, got {lg.eval_temperature}"),
        (lg.eval_samples == 1 or lg.eval_temperature > 0,
         "log.eval_samples > 1 needs log.eval_temperature > 0 (greedy decoding repeats)"),
        (cfg.scorer_errors in ("raise", "zero"),
         f"scorer_errors must be raise|zero, got {cfg.scorer_errors!r}"),
        (cfg.task in TASKS or cfg.task.endswith(".jsonl") or cfg.task.startswith("rg:"),
         f"unknown task {cfg.task!r}; valid tasks: {', '.join(TASKS)}, "
         "rg:<reasoning-gym dataset> or a .jsonl path"),
        (not cfg.task_params or cfg.task.startswith("rg:"),
         f"task_params apply only to rg:<dataset> tasks, not {cfg.task!r}"),
        (cfg.prompt_format in PROMPT_FORMATS,
         f"prompt_format {cfg.prompt_format!r} unknown; valid: {', '.join(PROMPT_FORMATS)}"),
        (cfg.device in DEVICES, f"device {cfg.device!r} unknown; valid: {', '.join(DEVICES)}"),
        (cfg.reward.model is not None or not cfg.reward.normalize,
         "reward.normalize applies only with reward.model (a reward model's scores)"),
        (cfg.reward.scale in SCALES,
         f"reward.scale {cfg.reward.scale!r} unknown; valid: {', '.join(SCALES)}"),
        (cfg.reward.model is None or cfg.reward.scale == "none",
         f"reward.scale {cfg.reward.scale} maps a checker's [0, 1] scores: not a reward "
         "model's (reward.model); use reward.normalize for those"),
        (not (cfg.reward.normalize and wants_greedy(cfg)),
         f"advantage.name {cfg.advantage.name}'s greedy baseline is scored raw: it cannot be "
         "compared with reward.normalize's running-normalised scores; turn one of them off"),
        (not cfg.reward.extra or cfg.reward.model is None,
         "reward.extra sums reward functions with the checker; with reward.model the "
         "reward model's score is the reward (combine them in one reward.fn instead)"),
        (all(isinstance(w, int | float) and not isinstance(w, bool) and math.isfinite(w)
             for w in cfg.reward.weights),
         f"reward.weights must be finite numbers, got {cfg.reward.weights}"),
        (len({fn_name(f) for f in (cfg.reward.fn, *cfg.reward.extra)})
         == 1 + len(cfg.reward.extra),
         f"reward functions must have distinct names (each is logged as reward/fn/<name>), "
         f"got {[cfg.reward.fn, *cfg.reward.extra]}"),
        (not cfg.reward.weights or len(cfg.reward.weights) == 1 + len(cfg.reward.extra),
         f"reward.weights has {len(cfg.reward.weights)} entries; it needs one per reward "
         f"function: reward.fn, then each of reward.extra ({1 + len(cfg.reward.extra)})"),
        (cfg.critic.init in CRITIC_INITS,
         f"critic.init {cfg.critic.init!r} unknown; valid: {', '.join(CRITIC_INITS)}"),
        (cfg.loss.nll_coef >= 0, f"loss.nll_coef must be >= 0, got {cfg.loss.nll_coef}"),
    ]


def check_parts(cfg) -> None:
    """Build the parts (their own hyper-parameter checks), then what they ask of the run."""

    build_parts(cfg)
    build_estimator(cfg)
    controller = build_controller_of(cfg)
    needs = ("the critic's per-step values" if controller.needs_values else
             "a critic to bootstrap a stop from (stop_value: bootstrap)"
             if getattr(controller, "bootstraps", False) else None)
    if needs and not cfg.actor_critic:

        critics = [n for n in list_advantages() if advantage_meta(n)["needs_critic"]]
        raise ConfigError(f"controller {cfg.controller.name!r} (with these hparams) needs "
                          f"{needs}: set advantage.name to an estimator that trains a critic "
                          f"({', '.join(critics)})")

    build_comparators(cfg)  # a bad comparator part fails now, naming its key
    if cfg.log.shadow_grad_cos and not cfg.log.comparators:
        raise ConfigError("log.shadow_grad_cos compares the run's gradient with a comparator's: "
                          "it needs log.comparators")
