"""An experiment's arms as verl launch commands (`lmpo compare --engine verl`).

For each arm x seed, `python -m verl.trainer.main_ppo` with Hydra overrides that set every
matched setting of the arm's resolved lmpo config to what lmpo means by it (`verl_settings`:
{verl config key: value}), the lmpo plugin's loss and estimator, the data that
`lmpo export-data` writes for the arm's task, tiers and seed, and the model path and
resources as placeholders the user fills ($MODEL_PATH, $GPUS_PER_NODE, $NNODES,
$MICRO_BATCH, $DATA). A setting verl's main trainer cannot express is a refusal naming
it; the arm is then listed, not launched. Runs in the core environment: verl need not be installed.

What maps (lmpo -> verl): rollout.batch_size / group_size -> data.train_batch_size
(prompts) and rollout.n; optim.minibatches -> ppo_mini_batch_size (prompts per optimiser
step); optim.epochs -> ppo_epochs; lr, warm-up steps, weight decay, grad clip, entropy
coefficient; the loss (lmpo_<name>, every hyper-parameter through
policy_loss.hparams, the clip also into verl's clip_ratio_low/high/c) and its
aggregation; the estimator (lmpo_<name>, equal to verl's own where verl has it; GAE is
verl's gae with gamma and lam, and its critic's lr and value clip); KL as a loss term
(use_kl_loss, kl_loss_coef, kl_loss_type) or in the reward (use_kl_in_reward, fixed
kl_ctrl); dynamic sampling (algorithm.filter_groups on the reward, max_num_gen_batches);
temperature, response length, LoRA rank and alpha, seeds and steps; optim.dtype -> the
actor's FSDP mixed_precision.param_dtype (verl's default is bf16 compute with float32
master weights, lmpo's bfloat16; lmpo's float32 default is written as fp32).
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field

from lmpo.advantages import advantage_hparams, advantage_meta
from lmpo.atomic import write_text
from lmpo.losses import default_aggregation, loss_hparams, loss_meta

LOSS_TARGET = "lmpo.integrations.verl.LmpoPolicyLossConfig"
VERL_LOG = "verl.jsonl"  # verl's FileLogger output in an lmpo run directory
ENTRYPOINT = "python -m verl.trainer.main_ppo"  # what starts verl's trainer
KL_KINDS = {"k1": "kl", "k2": "mse", "k3": "low_var_kl", "abs": "abs", "k1+": "k1+",
            "k3+": "low_var_kl+", "abs+": "abs+"}  # lmpo estimator -> verl's name
FSDP_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}  # optim.dtype -> verl's precision name
# what the user supplies: the model, the machines, the per-GPU micro-batch (memory), and
# the rollout engine (verl 0.9 has vLLM and SGLang; vllm is written, change it freely)
PLACEHOLDERS = {"actor_rollout_ref.model.path": "$MODEL_PATH",
                "trainer.n_gpus_per_node": "$GPUS_PER_NODE", "trainer.nnodes": "$NNODES",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": "$MICRO_BATCH",
                "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": "$MICRO_BATCH",
                "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": "$MICRO_BATCH",
                "actor_rollout_ref.rollout.name": "vllm"}
CRITIC_PLACEHOLDERS = {"critic.model.path": "$MODEL_PATH",
                       "critic.ppo_micro_batch_size_per_gpu": "$MICRO_BATCH"}


@dataclass
class Launch:
    arm: str
    seed: int
    settings: dict = field(default_factory=dict)  # verl key -> value ("+" where verl lacks it)
    refused: list[str] = field(default_factory=list)  # "setting=value: why"
    data: str = ""  # the data folder's name under $DATA

    log: str = ""  # where verl's file logger writes (VERL_FILE_LOGGER_PATH)

    def command(self, entrypoint: str = ENTRYPOINT) -> str:
        """The shell command; `entrypoint` starts verl's trainer (written as given)."""
        parts = [f"{k}={hydra_value(v)}" for k, v in self.settings.items()]
        log = [f"VERL_FILE_LOGGER_PATH={shlex.quote(self.log)}"] if self.log else []
        return " ".join(log + [entrypoint] + [shell_word(p) for p in parts])


PLACEHOLDER = re.compile(r"\$(MODEL_PATH|GPUS_PER_NODE|NNODES|MICRO_BATCH|DATA)\b")


def shell_word(word: str) -> str:
    """`word` as one shell word that the shell passes on literally, but for the resource
    placeholders lmpo writes ($MODEL_PATH, $DATA, ...), which it expands: every other
    character (a `$(...)`, a backtick, a quote, a space in an arm or task name) is quoted
    (`shlex.quote`)."""
    out, at = [], 0
    for m in PLACEHOLDER.finditer(word):
        if m.start() > at:
            out.append(shlex.quote(word[at:m.start()]))
        out.append(f"${m.group(1)}" if m.end() == len(word) or not
                   re.match(r"\w", word[m.end()]) else f"${{{m.group(1)}}}")
        at = m.end()
    if at < len(word) or not out:
        out.append(shlex.quote(word[at:]))
    return "".join(out)


def hydra_value(v) -> str:
    if isinstance(v, list):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    return str(v)


def data_key(cfg) -> str:
    """The folder `lmpo export-data` writes for this config's problems: task, tiers, pool,
    seed (the pool's draw), held-out size and reward scale decide the rows."""
    spec = {"task": cfg.task, "params": cfg.task_params, "clusters": cfg.rollout.clusters,
            "pool": cfg.rollout.pool_size, "seed": cfg.seed, "per_tier": cfg.log.eval_per_tier,
            "scale": cfg.reward.scale, "system": cfg.system_prompt}
    digest = hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:8]
    return f"{cfg.task.replace(':', '_')}-{digest}"


def refusals(cfg) -> list[str]:
    """The settings of `cfg` that verl's main PPO trainer cannot express, each named."""
    return [f"{name}: {why}" for bad, name, why in setting_checks(cfg) + part_checks(cfg)
            if bad]


def setting_checks(cfg) -> list[tuple[bool, str, str]]:
    """(refused, the setting, why) for each run setting verl's trainer lacks."""
    r = cfg.rollout
    return [
        (cfg.controller.name != "none", f"controller.name={cfg.controller.name}",
         "verl's rollout has no per-token stopping controller"),
        (r.sampler != "shuffled", f"rollout.sampler={r.sampler}",
         "verl's dataloader shuffles; it has no curriculum sampler"),
        (r.dtype != "float32", f"rollout.dtype={r.dtype}",
         "lmpo simulates a low-precision sampler; verl's rollout precision is its engine's"),
        (r.staleness > 0, f"rollout.staleness={r.staleness}",
         "verl's synchronous trainer samples with the current policy"),
        (bool(r.correction.links()), f"rollout.correction={r.correction.links()}",
         "set verl's algorithm.rollout_correction yourself: its modes are not lmpo's names"),
        (cfg.reward.model is not None, f"reward.model={cfg.reward.model}",
         "an lmpo reward model is not a verl reward model"),
        (cfg.reward.fn != "task", f"reward.fn={cfg.reward.fn}",
         "lmpo export-data writes the task's own reward only"),
        (bool(cfg.reward.extra), f"reward.extra={cfg.reward.extra}",
         "lmpo export-data writes the task's own reward only"),
        (cfg.loss.nll_coef != 0, f"loss.nll_coef={cfg.loss.nll_coef}",
         "verl's actor has no NLL term on correct responses"),
        (cfg.kl.coef > 0 and cfg.kl.bias_correction, "kl.bias_correction=True",
         "verl's KL loss has no importance-ratio correction"),
        (cfg.loss.off_policy_mask_threshold is not None,
         f"loss.off_policy_mask_threshold={cfg.loss.off_policy_mask_threshold}",
         "verl 0.9.1 has no off-policy sequence mask"),
        (cfg.kl.ref_sync_every > 0, f"kl.ref_sync_every={cfg.kl.ref_sync_every}",
         "verl 0.9.1's reference policy is frozen (no sync)"),
        (cfg.loss.seq_divergence_threshold is not None,
         f"loss.seq_divergence_threshold={cfg.loss.seq_divergence_threshold}",
         "verl 0.9.1 has no VACO sequence mask (open-instruct's)"),
        (cfg.loss.centered_score is not None,
         f"loss.centered_score={cfg.loss.centered_score}",
         "verl 0.9.1 has no score centering (SkyRL #2244 and miles #3317 are open PRs)"),
        (cfg.kl.schedule.name != "fixed" and cfg.kl.mode == "loss",
         f"kl.schedule={cfg.kl.schedule.name} with kl.mode=loss",
         "verl's adaptive kl_ctrl acts on the KL in the reward only (kl.mode: reward)"),
        (cfg.reward.overlong.buffer_len > 0, "reward.overlong",
         "set verl's DAPO reward manager's overlong_buffer yourself: lmpo export-data writes "
         "the task's own reward"),
        (cfg.loss.mask_truncated, "loss.mask_truncated=True",
         "verl 0.9.1's actor does not mask truncated responses"),
        (cfg.loss.agg == "prompt-mean", "loss.agg=prompt-mean",
         "verl 0.9.1's loss_agg_mode has no prompt-level mean"),
        (cfg.optim.entropy_schedule.name != "fixed",
         f"optim.entropy_schedule={cfg.optim.entropy_schedule.name}",
         "verl 0.9.1's entropy_coeff is fixed"),
        (cfg.loss.top_entropy_quantile < 1,
         f"loss.top_entropy_quantile={cfg.loss.top_entropy_quantile}",
         "verl 0.9.1's actor has no entropy-quantile token selection"),
        (r.batch_size // r.group_size % cfg.optim.minibatches != 0,
         f"optim.minibatches={cfg.optim.minibatches}",
         "the prompts per batch do not split into that many minibatches"),
    ]


def part_checks(cfg) -> list[tuple[bool, str, str]]:
    """(refused, the setting, why) for the loss's aggregation and the estimator's settings
    where verl's own differ."""
    checks = []
    agg = cfg.loss.agg or default_aggregation(cfg.loss.name)
    fixed = loss_meta(cfg.loss.name)["peer_agg"].get("verl")  # verl's own reduction
    # "row-mean" (geo_mean) is seq-mean-token-sum counting empty responses as rows
    fixed_as_mode = "seq-mean-token-sum" if fixed == "row-mean" else fixed
    checks.append((fixed is not None and agg != fixed_as_mode, f"loss.agg={agg}",
                   f"verl's {cfg.loss.name} aggregates {fixed} whatever loss_agg_mode says"))
    if cfg.actor_critic:
        checks += [(cfg.critic.init != "random", f"critic.init={cfg.critic.init}",
                    "verl's critic starts from a randomly initialised value head"),
                   (not cfg.advantage.hparams.get("whiten", True),
                    "advantage.hparams.whiten=False", "verl's GAE always whitens")]
    else:
        explicit = {k: v for k, v in cfg.advantage.hparams.items()
                    if advantage_hparams(cfg.advantage.name).get(k) != v}
        keyed = advantage_meta(cfg.advantage.name).get("peer_keys", {}).get("verl", {})
        checks += [(k not in keyed, f"advantage.hparams.{k}={v}",
                    "the plugin's estimator takes verl's settings only")
                   for k, v in explicit.items()]
    return checks


def verl_settings(cfg) -> dict:
    """{verl key: value} for every setting of `cfg` that maps (see the module docstring)."""
    r, o = cfg.rollout, cfg.optim
    prompts = r.batch_size // r.group_size
    actor = "actor_rollout_ref.actor"
    s = {"data.train_batch_size": prompts, "actor_rollout_ref.rollout.n": r.group_size,
         "data.max_response_length": r.max_new_tokens,
         "actor_rollout_ref.rollout.temperature": r.temperature,
         f"{actor}.ppo_mini_batch_size": max(prompts // o.minibatches, 1),
         f"{actor}.ppo_epochs": o.epochs, f"{actor}.optim.lr": o.lr,
         f"{actor}.optim.lr_warmup_steps": o.warmup_steps,
         f"{actor}.optim.weight_decay": o.weight_decay, f"{actor}.grad_clip": o.grad_clip,
         f"{actor}.entropy_coeff": o.entropy_coef,
         f"{actor}.policy_loss._target_": LOSS_TARGET,
         f"{actor}.policy_loss.loss_mode": f"lmpo_{cfg.loss.name}",
         f"{actor}.loss_agg_mode": cfg.loss.agg or default_aggregation(cfg.loss.name),
         f"+{actor}.fsdp_config.mixed_precision.param_dtype": FSDP_DTYPES[o.dtype]}
    hparams = loss_hparams(cfg.loss.name) | dict(cfg.loss.hparams)
    for k, v in hparams.items():
        if v is not None:
            s[f"+{actor}.policy_loss.hparams.{k}"] = v
    clip_keys = loss_meta(cfg.loss.name)["peer_keys"].get("verl", {})
    for hp, verl_key in (("eps_low", "clip_ratio_low"), ("eps_high", "clip_ratio_high")):
        if hp in clip_keys and hparams.get(hp) is not None:
            s[f"{actor}.{verl_key}"] = hparams[hp]
    if hparams.get("clip_ratio_c") is not None:
        s[f"{actor}.clip_ratio_c"] = hparams["clip_ratio_c"]
    s |= advantage_settings(cfg) | kl_settings(cfg)
    if r.dynamic_sampling:
        s |= {"algorithm.filter_groups.enable": True, "algorithm.filter_groups.metric": "reward",
              "algorithm.filter_groups.max_num_gen_batches": r.max_gen_batches}
    if cfg.lora.r:
        s |= {"actor_rollout_ref.model.lora_rank": cfg.lora.r,
              "actor_rollout_ref.model.lora_alpha": cfg.lora.alpha}
    s |= {"data.seed": cfg.seed, f"{actor}.data_loader_seed": cfg.seed,
          "actor_rollout_ref.rollout.seed": cfg.seed, "trainer.total_training_steps": cfg.steps}
    return s


def advantage_settings(cfg) -> dict:
    if not cfg.actor_critic:
        # verl's own twin where only its trainer can feed the estimator (remax's greedy pass)
        meta = advantage_meta(cfg.advantage.name)
        peer = meta["peer_names"].get("verl")
        out = {"algorithm.adv_estimator": peer or f"lmpo_{cfg.advantage.name}"}
        if meta["wants_paths"]:  # verl's actor returns sum_pi_squared only when asked
            changed = {k: v for k, v in cfg.advantage.hparams.items()
                       if advantage_hparams(cfg.advantage.name).get(k) != v}
            if changed:
                raise ValueError(f"advantage.hparams {changed}: verl's trainer calls its "
                                 f"{peer} with its defaults and reads no setting for them")
            out["actor_rollout_ref.actor.calculate_sum_pi_squared"] = True
        return out
    hp = advantage_hparams("gae") | dict(cfg.advantage.hparams)
    out = {"algorithm.adv_estimator": "gae", "algorithm.gamma": hp["gamma"],
           "algorithm.lam": hp["lam"], "critic.optim.lr": cfg.critic.lr} | CRITIC_PLACEHOLDERS
    if cfg.critic.value_clip is not None:
        out["critic.cliprange_value"] = cfg.critic.value_clip
    return out


def kl_settings(cfg) -> dict:
    actor = "actor_rollout_ref.actor"
    if cfg.kl.coef == 0:
        return {f"{actor}.use_kl_loss": False, "algorithm.use_kl_in_reward": False}
    kind = KL_KINDS[cfg.kl.kind]
    if cfg.kl.mode == "loss":
        return {f"{actor}.use_kl_loss": True, f"{actor}.kl_loss_coef": cfg.kl.coef,
                f"{actor}.kl_loss_type": kind, "algorithm.use_kl_in_reward": False}
    ctrl = {"algorithm.kl_ctrl.type": "fixed"}
    if cfg.kl.schedule.name == "adaptive_kl":  # verl's AdaptiveKLController
        from lmpo.trainer.schedules import schedule_settings

        full = schedule_settings(cfg.kl.schedule)
        ctrl = {"algorithm.kl_ctrl.type": "adaptive",
                "algorithm.kl_ctrl.target_kl": full["target_kl"],
                "algorithm.kl_ctrl.horizon": full["horizon"]}
    return {f"{actor}.use_kl_loss": False, "algorithm.use_kl_in_reward": True,
            **ctrl, "algorithm.kl_ctrl.kl_coef": cfg.kl.coef, "algorithm.kl_penalty": kind}


def launch(exp, arm, seed: int, out=None, cfg=None) -> Launch:
    """The verl launch of one arm x seed (settings, refusals and data folder) from its
    config `cfg` (built from the experiment when not given); with `out` (a compare
    directory), verl's file logger writes the run's metrics into its run directory,
    `runs/<arm>/seed<k>/verl.jsonl`, where `lmpo report` reads them."""
    if cfg is None:
        from lmpo.experiments.design.spec import arm_config

        cfg = arm_config(exp, arm, seed)
    key = data_key(cfg)
    log = str(out.resolve() / "runs" / arm.name / f"seed{seed}" / VERL_LOG) if out else ""
    run = Launch(arm.name, seed, refused=refusals(cfg), data=key, log=log)
    run.settings = {"data.train_files": f"$DATA/{key}/train.parquet",
                    "data.val_files": f"$DATA/{key}/test.parquet",
                    "reward.custom_reward_function.path": f"$DATA/{key}/reward.py",
                    "reward.custom_reward_function.name": "compute_score",
                    **verl_settings(cfg), **PLACEHOLDERS,
                    "trainer.project_name": exp.name,
                    "trainer.experiment_name": f"{arm.name}-seed{seed}",
                    "trainer.logger": ["console", "file"], "trainer.val_before_train": True,
                    "trainer.test_freq": cfg.steps}
    return run


@dataclass
class VerlPlan:
    """An experiment planned for verl once: its arms x condition levels (`flat`), every
    arm x seed's config, and its launch. Printing, writing the compare directory and
    submitting jobs all read the one plan."""

    exp: object  # the experiment as given (its seeds, its file's contents)
    flat: object  # exp.expand()
    configs: dict  # (arm name, seed) -> TrainConfig
    runs: list  # Launch, arm-major


def plan_verl(exp, out=None) -> VerlPlan:
    """The experiment's verl plan: each config built once, each launch from it (with `out`,
    each run's verl log in its run directory)."""
    from lmpo.experiments.design.spec import arm_config

    flat = exp.expand()  # arms x condition levels
    configs = {(arm.name, seed): arm_config(flat, arm, seed)
               for arm in flat.arms for seed in exp.seeds}
    runs = [launch(flat, arm, seed, out, configs[arm.name, seed])
            for arm in flat.arms for seed in exp.seeds]
    return VerlPlan(exp, flat, configs, runs)


def verl_lines(plan: VerlPlan, config_path: str,
               entrypoint: str = ENTRYPOINT) -> tuple[list[str], int, int]:
    """The lines `lmpo compare --engine verl` prints: one `lmpo export-data` per data folder,
    one verl command per launchable arm x seed, a comment per refused arm; with the
    numbers of launched and refused runs."""
    runs = plan.runs
    lines, exported = [], set()
    for run in runs:
        if run.refused or run.data in exported:
            continue
        exported.add(run.data)
        lines.append(f"lmpo export-data --experiment {shlex.quote(config_path)} --arm "
                     f"{shlex.quote(run.arm)} --seed {run.seed} --out "
                     f"{shell_word('$DATA/' + run.data)}")
    refused_arms = {}
    for run in runs:
        if run.refused:
            refused_arms.setdefault(run.arm, run.refused)
        else:
            lines.append(run.command(entrypoint))
    for arm, why in refused_arms.items():
        lines.append(f"# refused: arm {arm}: " + "; ".join(why))
    launched = sum(not r.refused for r in runs)
    return lines, launched, len(runs) - launched


def write_plan(plan: VerlPlan, out) -> None:
    """experiment.yaml and configs/<arm>-seed<k>.yaml, as `lmpo compare` writes them (so
    `lmpo report out` reads the runs)."""
    import yaml

    from lmpo.config import save_config

    (out / "configs").mkdir(parents=True, exist_ok=True)
    write_text(out / "experiment.yaml", yaml.safe_dump(plan.exp.to_dict(), sort_keys=False))
    for (arm, seed), cfg in plan.configs.items():
        save_config(cfg, out / "configs" / f"{arm}-seed{seed}.yaml")
        (out / "runs" / arm / f"seed{seed}").mkdir(parents=True, exist_ok=True)


def print_verl_sweep(exp, config_path: str, out: str | None, *, strict: bool,
                     entrypoint: str = ENTRYPOINT) -> int:
    """`lmpo compare --engine verl`: print the lines (and with `out`, write verl.sh and the
    compare directory's plan); 1 if no arm maps, or with `strict` if any is refused."""
    import sys
    from pathlib import Path

    out = Path(out) if out else None  # without it: print only
    if out:
        out.mkdir(parents=True, exist_ok=True)
    plan = plan_verl(exp, out)
    if out:
        write_plan(plan, out)
    lines, launched, refused = verl_lines(plan, config_path, entrypoint)
    header = ["# verl launches of experiment " + exp.name + " (lmpo compare --engine verl)",
              "# set MODEL_PATH, GPUS_PER_NODE, NNODES, MICRO_BATCH and DATA first"]
    if out:
        write_text(out / "verl.sh", "\n".join(header + lines) + "\n")
    print("\n".join(lines))
    print(f"{launched} run(s) mapped, {refused} refused"
          + (f"; written to {out / 'verl.sh'}" if out else ""), file=sys.stderr)
    if launched == 0:
        print("lmpo compare: error: no arm maps to verl", file=sys.stderr)
        return 1
    return 1 if strict and refused else 0
