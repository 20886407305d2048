"""`TrainConfig.validate`: every name resolves and every number is in range before any
work, each failure one line that names the key. The checks come in groups, one function
each; the parts' own hyper-parameters are checked by building them (`lmpo.trainer.parts`).
"""

from __future__ import annotations

import dataclasses
import math

from lmpo.advantages import advantage_meta, list_advantages
from lmpo.config import ConfigError
from lmpo.domains import parse
from lmpo.losses import list_losses, loss_meta
from lmpo.registry import nearest
from lmpo.rewards import build_reward
from lmpo.rewards.multi import fn_name
from lmpo.rollout import list_controllers, list_corrections
from lmpo.rollout.corrections import acts_per_token
from lmpo.rollout.precision import QUANTISED
from lmpo.tasks import TASKS
from lmpo.trainer.comparators import build_comparators
from lmpo.trainer.greedy import wants_greedy
from lmpo.trainer.parts import build_controller_of, build_estimator, build_parts
from lmpo.trainer.schedules import list_schedules, schedule_settings
from lmpo.trainer.trackers import check_wandb
from lmpo.user_modules import import_user_modules


def validate(cfg) -> None:
    """Raise ConfigError on the first failed check of `cfg` (a TrainConfig)."""
    import_user_modules(cfg.imports)  # your own parts register before their names resolve
    check_finite(cfg)
    check_names(cfg)
    check_domains(cfg)
    for ok, msg in [*rollout_checks(cfg), *optim_checks(cfg), *setting_checks(cfg),
                    *centering_checks(cfg)]:
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
    corr = cfg.rollout.correction
    kinds = [("rollout.correction.kind", kind) for kind, _ in corr.links()] if not corr.chain \
        else [(f"rollout.correction[{i}].kind", kind) for i, (kind, _) in enumerate(corr.links())]
    for key, name, names in (("advantage", cfg.advantage.name, list_advantages()),
                             ("controller", cfg.controller.name, list_controllers()),
                             ("kl.schedule.name", cfg.kl.schedule.name, list_schedules("kl")),
                             ("optim.entropy_schedule.name", cfg.optim.entropy_schedule.name,
                              list_schedules("entropy")),
                             *((key, kind, list_corrections()) for key, kind in kinds)):
        if name not in names:
            raise ConfigError(f"unknown {key} {name!r}{nearest(name, names)}; valid: "
                              f"{', '.join(names)}")


def check_domains(section, prefix: str = "") -> None:
    """Every field that declares a domain (`lmpo.domains.dom`) holds a value in
    it; the first that does not fails in one line naming the key."""
    for f in dataclasses.fields(section):
        value, key = getattr(section, f.name), prefix + f.name
        if dataclasses.is_dataclass(value):
            check_domains(value, key + ".")
        elif "domain" in f.metadata:
            domain = parse(f.metadata["domain"])
            if not domain.contains(value):
                raise ConfigError(domain_message(key, value, domain))


def domain_message(key: str, value, domain) -> str:
    """A value outside its domain in words: "steps must be >= 1, got 0", "rollout.dtype
    'fp4' unknown; valid: float32, ..."."""
    if domain.kind == "choice":
        return f"{key} {value!r} unknown; valid: {', '.join(domain.choices)}"
    if domain.kind == "bool":
        return f"{key} must be true or false, got {value!r}"

    def num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else str(x)

    lo, hi = domain.low, domain.high
    if hi == math.inf:
        want = f">= {num(lo)}" if domain.low_closed else f"> {num(lo)}"
    else:
        want = f"in {'[' if domain.low_closed else '('}{num(lo)}, {num(hi)}" \
               f"{']' if domain.high_closed else ')'}"
    typed = domain.kind == "int" and not (isinstance(value, int) and not isinstance(value, bool))
    return f"{key} must be {want}" + (" or null" if domain.optional else "") + \
        f", got {value!r}" + (" (an int)" if typed else "")


def rollout_checks(cfg) -> list[tuple[bool, str]]:
    r = cfg.rollout
    return [
        (r.batch_size % max(r.group_size, 1) == 0,
         f"rollout.batch_size {r.batch_size} is not divisible by rollout.group_size "
         f"{r.group_size}"),
        (not r.dynamic_sampling or not cfg.actor_critic,
         "rollout.dynamic_sampling drops groups whose rewards are all equal: it needs the "
         "group family (an estimator without a critic)"),
        (r.max_gen_batches == 1 or r.dynamic_sampling,
         f"rollout.max_gen_batches {r.max_gen_batches} refills dynamic sampling's batch: it "
         "needs rollout.dynamic_sampling and the group family"),
        (not cfg.kl.ref_sync_every or cfg.lora.r == 0,
         f"kl.ref_sync_every {cfg.kl.ref_sync_every} mixes the reference's weights toward the "
         "policy's: with LoRA adapters (lora.r > 0) the reference is the base model with "
         "the adapters off, which has no weights of its own to move"),
        (not cfg.kl.ref_sync_every or cfg.kl.coef > 0,
         f"kl.ref_sync_every {cfg.kl.ref_sync_every} moves the reference of the KL: it needs "
         "kl.coef > 0"),
        (r.dtype not in QUANTISED or cfg.lora.r == 0,
         f"rollout.dtype {r.dtype} quantises the decoder's linear layers: not with LoRA "
         "adapters (lora.r > 0); use bfloat16 or float16"),
        (r.batch_size // max(r.group_size, 1) <= r.pool_size,
         f"rollout.batch_size {r.batch_size} asks for {r.batch_size // max(r.group_size, 1)} "
         f"prompts a step, more than rollout.pool_size {r.pool_size} holds (each step would "
         "train on the whole pool, not the batch asked for): lower rollout.batch_size or "
         "raise rollout.pool_size"),
        (not r.bf16_boundary or r.dtype in QUANTISED,
         f"rollout.bf16_boundary keeps layers out of FP8/FP4 quantisation: it needs one of "
         f"rollout.dtype {', '.join(QUANTISED)}, got {r.dtype}"),
        (r.correction.kind is not None or not r.correction.hparams,
         f"rollout.correction.hparams {r.correction.hparams} need a rollout.correction.kind"),
        (not (r.correction.chain and (r.correction.kind or r.correction.hparams)),
         "rollout.correction has both a chain and a kind: give a list of {kind, hparams} or "
         "one kind, not both"),
    ]


def adaptive_kl_horizon(cfg) -> float:
    """adaptive_kl's horizon (infinite for a schedule without one)."""
    return schedule_settings(cfg.kl.schedule).get("horizon", math.inf)


def optim_checks(cfg) -> list[tuple[bool, str]]:
    o, kl = cfg.optim, cfg.kl
    return [
        (cfg.critic.value_coef > 0 or not cfg.actor_critic,
         f"critic.value_coef must be > 0 for the actor-critic family (the critic would not "
         f"learn), got {cfg.critic.value_coef}"),
        (cfg.rollout.batch_size % o.minibatches == 0,
         f"rollout.batch_size {cfg.rollout.batch_size} is not divisible by optim.minibatches "
         f"{o.minibatches}"),
        (kl.mode == "loss" or cfg.actor_critic,
         "kl.mode=reward needs the actor-critic family (an estimator that trains a critic)"),
        (not kl.bias_correction or kl.mode == "loss",
         "kl.bias_correction weights a KL loss term: it needs kl.mode=loss"),
        (cfg.reward.overlong.buffer_len <= cfg.rollout.max_new_tokens,
         f"reward.overlong.buffer_len {cfg.reward.overlong.buffer_len} is longer than "
         f"rollout.max_new_tokens {cfg.rollout.max_new_tokens}: the penalty would start "
         "before the response does"),
        (cfg.kl.schedule.name == "fixed" or cfg.kl.coef > 0,
         f"kl.schedule {cfg.kl.schedule.name} moves kl.coef by a factor: it needs kl.coef > 0"),
        (cfg.kl.schedule.name != "adaptive_kl" or adaptive_kl_horizon(cfg) > 0.2
         * cfg.rollout.batch_size,
         f"kl.schedule adaptive_kl: horizon {adaptive_kl_horizon(cfg)} must exceed 0.2 x "
         f"rollout.batch_size ({0.2 * cfg.rollout.batch_size:g}), or one step can turn the "
         "KL coefficient negative (its factor is 1 +- 0.2 n / horizon, n the step's responses)"),
        (not (cfg.loss.agg == "prompt-mean" and cfg.loss.nll_coef),
         "loss.agg prompt-mean weighs each prompt's tokens, but loss.nll_coef's term counts "
         "the correct responses' tokens alone: use another loss.agg with loss.nll_coef"),
    ]


def setting_checks(cfg) -> list[tuple[bool, str]]:
    lg = cfg.log
    return [
        (lg.eval_samples == 1 or lg.eval_temperature > 0,
         "log.eval_samples > 1 needs log.eval_temperature > 0 (greedy decoding repeats)"),
        (cfg.task in TASKS or cfg.task.endswith(".jsonl") or cfg.task.startswith("rg:"),
         f"unknown task {cfg.task!r}; valid tasks: {', '.join(TASKS)}, "
         "rg:<reasoning-gym dataset> or a .jsonl path"),
        (not cfg.task_params or cfg.task.startswith("rg:"),
         f"task_params apply only to rg:<dataset> tasks, not {cfg.task!r}"),
        (cfg.reward.model is not None or not cfg.reward.normalize,
         "reward.normalize applies only with reward.model (a reward model's scores)"),
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
    ]


def centering_checks(cfg) -> list[tuple[bool, str]]:
    """loss.centered_score centers a score-function loss, and composes with what weighs
    or masks whole responses (lmpo.losses.centering)."""
    mode = cfg.loss.centered_score
    if mode is None:
        return []
    scorers = [n for n in list_losses() if loss_meta(n)["score_function"]]
    links = cfg.rollout.correction.links()
    per_token = [kind for kind, hp in links if kind in list_corrections()
                 and acts_per_token(kind, hp)]
    return [
        (cfg.loss.name in scorers,
         f"loss.centered_score {mode} centers a score-function loss (-A log pi: "
         f"{', '.join(scorers)}); {cfg.loss.name!r} weighs its score by a ratio, which "
         "would need that ratio for every vocabulary entry"),
        (not per_token,
         f"loss.centered_score composes with weights and masks of whole responses; "
         f"rollout.correction {', '.join(per_token)} weighs or masks single tokens by their "
         "own ratio (it would need f(pi_old(v) / q_v) for every v): use seq_tis, mis with "
         "level sequence, rs_seq_* or outlier_token_is"),
        (cfg.loss.seq_divergence_threshold is None or not cfg.loss.seq_divergence_directional,
         "loss.centered_score composes with masks of whole responses; "
         "loss.seq_divergence_directional drops single tokens: set it false"),
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
