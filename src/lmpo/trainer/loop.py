"""`lmpo train`: one readable loop for every method.

rollout -> scores -> advantages -> K epochs of minibatch updates -> diagnostics
-> evaluation -> log -> checkpoint. What differs between methods comes from
registries and their metadata (the loss, the estimator and whether it
`needs_critic`, the rollout controller); no method is named here.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import torch

from lmpo.advantages import nonzero_variance_groups
from lmpo.config import ConfigError, save_config
from lmpo.evaluate import evaluate, metrics_row, result_from_row
from lmpo.faults import CRASH_ENV, crash_point, parse_crash_spec
from lmpo.losses import OR_MARGIN, displacement_metrics, loss_hparams
from lmpo.masked import masked_mean
from lmpo.models import ValueModel, load_policy, save_policy
from lmpo.models.adapters import merged_copy
from lmpo.rollout import IncrementalValues, sample, sampling_mode
from lmpo.tasks import Sampler, get_task
from lmpo.tasks.heldout import heldout_split, sample_excluding
from lmpo.trainer.batch import (
    critic_values,
    explained_variance,
    finish_stopped,
    forward_logprobs,
    score_rollout,
)
from lmpo.trainer.checkpoint import (
    append_row,
    latest_checkpoint,
    load_checkpoint,
    read_rows,
    save_checkpoint,
    truncate_rows,
)
from lmpo.trainer.dynamic import Drawn, refill
from lmpo.trainer.resume import check_resumable
from lmpo.trainer.runtime import Runtime, prepare_policy, resolve_device
from lmpo.trainer.state import RunState
from lmpo.trainer.train_config import Bound, TrainConfig
from lmpo.trainer.update import NonFiniteError, TrainBatch, update
from lmpo.warmstart import resolve_policy

__all__ = ["NonFiniteError", "train", "train_step", "training_pool"]


def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          progress: bool = True, verbose: bool | None = None) -> dict:
    """Run (or resume) `cfg` in `run_dir`; returns {"before": eval, "after": eval, ...}.

    `progress` shows the progress bars; `verbose` (default: as `progress`) prints the
    held-out counts."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not resume and read_rows(metrics_path):
        raise ConfigError(f"{run_dir} already holds a run (metrics.jsonl); pass --resume to "
                          "continue it or choose a new --run-dir")
    parse_crash_spec(os.environ.get(CRASH_ENV))  # a malformed spec fails before any work
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume:
        check_resumable(run_dir / "config.yaml", cfg)
    policy_dir = resolve_policy(cfg.policy, progress=progress)  # may build the warm start
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)

    # ================================================================ setup
    bound = cfg.bind()
    policy, tok = load_policy(policy_dir)
    policy.to(resolve_device(cfg.device)).train()
    critic = ValueModel.from_policy(policy) if cfg.actor_critic else None  # before adapters
    policy, reference = prepare_policy(policy, cfg)
    task = get_task(cfg.task, cfg.task_params or None)
    rt = Runtime.build(cfg, policy, tok, task, progress=progress)
    heldout = heldout_split(task, cfg.log.eval_per_tier)
    group = cfg.rollout.group_size
    state = RunState(
        policy=policy, reference=reference,
        opt=torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad],
                              lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay),
        sampler=Sampler(training_pool(task, cfg, heldout.prompts),
                        cfg.rollout.batch_size // group, kind=cfg.rollout.sampler,
                        seed=cfg.seed, order=task.clusters),
        estimator=bound.estimator, critic=critic,
        critic_opt=torch.optim.AdamW(critic.parameters(), lr=cfg.critic.lr) if critic else None,
        controller=bound.controller, reward_norm=getattr(rt.reward, "normalizer", None),
        rngs={"sample": torch.Generator().manual_seed(cfg.seed),
              "shuffle": torch.Generator().manual_seed(cfg.seed + 1)})
    if progress if verbose is None else verbose:
        print(f"held-out set ({cfg.task}): {heldout.describe()}", flush=True)

    def run_eval():
        return evaluate(policy, tok, task, heldout.problems,
                        max_new_tokens=cfg.log.eval_max_new_tokens,
                        trained_tiers=cfg.rollout.clusters,
                        temperature=cfg.log.eval_temperature, samples=cfg.log.eval_samples,
                        reward=rt.reward, encode=rt.encode, eos_ids=rt.stop_ids)

    if ckpt is not None:
        state.load_state_dict(load_checkpoint(ckpt))
    if metrics_path.exists():
        truncate_rows(metrics_path, state.step)
    save_config(cfg, run_dir / "config.yaml")
    writer = None
    if cfg.log.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / "tb"), purge_step=state.step + 1)
    if state.before is None:
        state.before = run_eval()

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(f"[bold]{cfg.loss.name}/{cfg.advantage.name}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} reward {task.fields[reward]:.3f} "
                              "acc {task.fields[acc]:.2f} H {task.fields[ent]:.3f} "
                              "{task.fields[tps]:.0f} tok/s"),
                   TimeElapsedColumn(), disable=not progress)
    job = bar.add_task("train", total=cfg.steps, completed=state.step, reward=0.0, acc=0.0,
                       ent=0.0, tps=0.0)
    bar.start()
    try:
        for step in range(state.step + 1, cfg.steps + 1):
            row = train_step(step, cfg, state, bound, task, rt)
            # ======================================================== evaluation
            if step % cfg.log.eval_every == 0 or step == cfg.steps:
                row |= metrics_row(run_eval())
            # ======================================================== log
            crash_point("before_row", step)
            append_row(metrics_path, row)
            crash_point("after_row", step)
            if writer:
                for k, v in row.items():
                    if k != "step":
                        writer.add_scalar(k, v, step)
                writer.flush()
            bar.update(job, completed=step, reward=row["reward/mean"],
                       acc=row["reward/accuracy"], ent=row.get("policy/entropy", 0.0),
                       tps=row["time/tokens_per_s"])
            # ======================================================== checkpoint
            state.step = step
            if step % cfg.log.checkpoint_every == 0 or step == cfg.steps:
                save_checkpoint(run_dir, step, state.state_dict(), keep=cfg.log.keep_checkpoints)
                crash_point("after_checkpoint", step)
    finally:
        bar.stop()
        if writer:
            writer.close()

    # ================================================================ finish
    save_policy(merged_copy(policy), tok, run_dir / "policy")  # LoRA: adapters folded in
    rows = read_rows(metrics_path)
    final = rows[-1] if rows else {}
    summary = {"before": state.before, "after": result_from_row(final, state.before),
               "steps": cfg.steps,
               "heldout": {k: vars(c) for k, c in heldout.counts.items()}}
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def training_pool(task, cfg: TrainConfig, exclude: frozenset[str]) -> list:
    """The fixed problem pool, spread evenly over `rollout.clusters` (or every tier),
    drawn outside the held-out set `exclude`."""
    rng = random.Random(cfg.seed)
    clusters = cfg.rollout.clusters
    if not clusters:
        return sample_excluding(task, cfg.rollout.pool_size, rng, exclude)
    unknown = [c for c in clusters if c not in task.clusters]
    if unknown:
        raise ConfigError(f"rollout.clusters {unknown} unknown for task {cfg.task}; "
                          f"tiers: {', '.join(task.clusters)}")
    per = max(1, cfg.rollout.pool_size // len(clusters))
    return [p for c in clusters for p in sample_excluding(task, per, rng, exclude, cluster=c)]


def lr_at(step: int, cfg: TrainConfig) -> float:
    return cfg.optim.lr * min(1.0, step / max(1, cfg.optim.warmup_steps))


def or_alpha(cfg: TrainConfig) -> float:
    """The margin of the post-update OR diagnostics (see LogConfig.or_alpha)."""
    if cfg.log.or_alpha is not None:
        return cfg.log.or_alpha
    own = loss_hparams(cfg.loss.name)
    return float(cfg.loss.hparams.get("alpha", own["alpha"])) if "alpha" in own else OR_MARGIN


def train_step(step: int, cfg: TrainConfig, state: RunState, bound: Bound, task,
               rt: Runtime) -> dict:
    """One RL iteration; returns the step's metrics row."""
    policy, critic, controller = state.policy, state.critic, state.controller
    tok, dev = rt.tokenizer, rt.device
    t_start = time.perf_counter()
    # ================================================================ rollout
    group = cfg.rollout.group_size
    needs_values = controller is not None and controller.needs_values
    r_fail = controller.r_fail if controller is not None else 0.0
    t_gen = 0.0

    def draw() -> Drawn:  # one generation round, scored
        nonlocal t_gen
        t0 = time.perf_counter()
        problems = [p for p in state.sampler.next_batch() for _ in range(group)]
        with sampling_mode(policy):
            rollout = sample(rt.rollout_model(), [rt.encode(p.prompt) for p in problems],
                             max_new_tokens=cfg.rollout.max_new_tokens,
                             temperature=cfg.rollout.temperature, eos_token_id=rt.stop_ids,
                             pad_token_id=tok.pad_token_id, generator=state.rngs["sample"],
                             value_fn=IncrementalValues(critic) if needs_values else None,
                             stopper=controller)
        t_gen += time.perf_counter() - t0
        scored, hits, errors = score_rollout(rt.reward, problems, rollout.texts(tok),
                                             rollout.stop_reason, r_fail=r_fail,
                                             on_error=cfg.scorer_errors)
        return Drawn(problems, rollout, scored, hits, errors)

    drawn, refill_metrics = draw(), {}
    if cfg.rollout.dynamic_sampling and cfg.rollout.max_gen_batches > 1:
        drawn, refill_metrics = refill(drawn, draw, group=group,
                                       max_batches=cfg.rollout.max_gen_batches,
                                       pad_token_id=tok.pad_token_id)
    problems, rollout, scored, hits, scorer_errors = (
        drawn.problems, drawn.rollout, drawn.scored, drawn.hits, drawn.scorer_errors)
    group_ids = torch.arange(len(problems)) // group
    correct = torch.tensor([float(ok) for ok in hits])
    t_rollout = t_start + t_gen
    t_score = time.perf_counter()
    stop_diag: dict[str, float] = {}
    if controller is not None and cfg.espo.measure_false_positives:  # with the rollout policy
        with sampling_mode(policy):
            stop_diag = finish_stopped(policy, tok, task, problems, rollout,
                                       max_new_tokens=cfg.rollout.max_new_tokens,
                                       temperature=cfg.rollout.temperature,
                                       seed=cfg.seed * 1_000_003 + step, reward=rt.reward,
                                       eos_ids=rt.stop_ids)
    t_diag = time.perf_counter()
    # ================================================================ advantages
    # a sample its reward function scored None takes no part in the update (as in TRL)
    row: dict = {"step": step, "data/reward_none": float(sum(s is None for s in scored))}
    used = torch.tensor([i for i, s in enumerate(scored) if s is not None], dtype=torch.long)
    scores = torch.tensor([s for s in scored if s is not None], dtype=torch.float32)
    if not len(used):  # nothing to learn from: no update, the step is still logged
        state.counters.tokens += rollout.num_generated
        return row | {"reward/mean": 0.0, "reward/accuracy": float(correct.mean()),
                      "tokens/generated": float(rollout.num_generated),
                      "tokens/cumulative": float(state.counters.tokens), "train/updates": 0.0,
                      "time/step": time.perf_counter() - t_start, "time/tokens_per_s": 0.0}
    if len(used) < len(scored):
        rollout, group_ids = rollout.select(used), group_ids[used]
        problems = [problems[i] for i in used.tolist()]
    ids, mask = (x.to(dev) for x in rollout.full_sequences())
    resp_ids, resp_mask = rollout.response_ids.to(dev), rollout.response_mask.to(dev)
    old_logp = rollout.logp.to(dev)
    b, t = resp_ids.shape
    diagnose = (step - 1) % cfg.log.policy_kl_every == 0
    pre_update = None  # the float32 policy's log-probs before this step's update
    if cfg.rollout.old_logp == "recompute" or cfg.rollout.dtype != "float32" or diagnose:
        with torch.no_grad():
            recomputed, _ = forward_logprobs(policy, ids, mask, resp_ids,
                                             cfg.rollout.temperature, with_entropy=False)
        row["rollout/logp_mismatch"] = float(masked_mean((old_logp - recomputed).abs(),
                                                         resp_mask))
        pre_update = recomputed * resp_mask
        if cfg.rollout.old_logp == "recompute":
            old_logp = pre_update
    ref_logp = None
    if cfg.kl.coef > 0 or diagnose:
        with torch.no_grad():
            ref_logp, _ = forward_logprobs(state.reference, ids, mask, resp_ids,
                                           cfg.rollout.temperature, with_entropy=False)
    batch = TrainBatch(ids, mask, resp_ids, resp_mask, old_logp, adv=None, keep=torch.arange(b),
                       ref_logp=ref_logp)
    if critic is not None:
        with torch.no_grad():
            batch.old_values = critic_values(critic, ids, mask, t) * resp_mask
        rewards = torch.zeros(b, t, device=dev)
        rewards[torch.arange(b), rollout.lengths - 1] = scores.to(dev)
        if cfg.kl.coef > 0 and cfg.kl.mode == "reward":
            rewards = rewards - cfg.kl.coef * (old_logp - ref_logp) * resp_mask
        batch.adv, batch.returns, adv_metrics = state.estimator(rewards, batch.old_values,
                                                                resp_mask)
        row |= adv_metrics | {"value/explained_variance": explained_variance(
            batch.old_values, batch.returns, resp_mask)}
    else:
        tiers = [p.cluster for p in problems]
        seq_adv, adv_metrics = state.estimator(scores, group_ids, clusters=tiers)
        row |= adv_metrics | token_zero_frac(seq_adv, rollout.response_mask, tiers)
        if cfg.rollout.dynamic_sampling:
            batch.keep, dropped = nonzero_variance_groups(scores, group_ids)
            row["data/groups_dropped"] = float(dropped)  # after a refill: its rounds' drops
        batch.adv = seq_adv.to(dev)[:, None].expand(b, t)
    # ================================================================ update
    row |= update(state, batch, bound.loss_fn, bound.agg, cfg, lr=lr_at(step, cfg), step=step)
    t_update = time.perf_counter()
    # ================================================================ diagnostics
    if diagnose or row["train/updates"] == 0:
        with torch.no_grad():
            new_logp, ent = forward_logprobs(policy, ids, mask, resp_ids, cfg.rollout.temperature)
        if row["train/updates"] == 0:  # nothing trained (all groups dropped / skipped)
            row["policy/entropy"] = float(masked_mean(ent, resp_mask))
        if diagnose:
            # KL between consecutive policies (k3), not to the anchor: a bf16 rollout's
            # mismatch is rollout/logp_mismatch, not a step the update took
            step_rho = new_logp - pre_update
            row["kl/consecutive"] = float(masked_mean(
                torch.exp(step_rho.clamp(-20, 20)) - 1 - step_rho, resp_mask))
            rho = new_logp - old_logp
            after = displacement_metrics(rho, batch.adv, resp_mask, or_alpha(cfg))
            row |= {"diag/displacement_after": after["displacement"],
                    "diag/displacement_seq_after": after["displacement_seq"],
                    "diag/or_residual_after": after["or/residual"],
                    "diag/or_overshoot_after": after["or/overshoot_frac"]}
    if ref_logp is not None:
        row["kl/ref"] = float(masked_mean(old_logp - ref_logp, resp_mask))
    generated = rollout.num_generated
    state.counters.tokens += generated
    row |= {
        "reward/mean": float(scores.mean()) if b else 0.0,
        "reward/std": float(scores.std()) if b > 1 else 0.0,
        "reward/accuracy": float(correct.mean()),
        "tokens/generated": float(generated), "tokens/cumulative": float(state.counters.tokens),
        "response/length_mean": float(rollout.lengths.float().mean()),
        "data/scorer_errors": float(scorer_errors),
        "train/skipped_updates": float(state.counters.skipped), "lr": lr_at(step, cfg),
    } | refill_metrics | rt.reward.pop_metrics()  # with a refill, reward/* cover every sample
    if controller is not None:
        stopped = [i for i, r_ in enumerate(rollout.stop_reason) if r_ == "early_stop"]
        row |= stop_diag | {"espo/stopped": float(len(stopped)),
                            "espo/stop_position_mean": float(
                                rollout.lengths[stopped].float().mean()) if stopped else 0.0}
        controller.observe(row, step)
        row |= controller.metrics()
    t_end = time.perf_counter()
    row |= {"time/rollout": t_rollout - t_start, "time/scoring": t_score - t_rollout,
            "time/espo_diagnostics": t_diag - t_score, "time/update": t_update - t_diag,
            "time/step": t_end - t_start,
            "time/tokens_per_s": generated / max(t_rollout - t_start, 1e-9)}
    return row


def token_zero_frac(seq_adv: torch.Tensor, resp_mask: torch.Tensor,
                    tiers: list[str]) -> dict[str, float]:
    """`adv/zero_frac` as a share of response tokens with A == 0, overall and per tier."""
    zero = (seq_adv == 0).to(resp_mask.dtype)[:, None] * resp_mask  # [B, T]
    tokens = resp_mask.sum(-1)
    out = {"adv/zero_frac": float(zero.sum() / tokens.sum().clamp(min=1))}
    for tier in dict.fromkeys(tiers):
        sel = torch.tensor([x == tier for x in tiers])
        out[f"adv/zero_frac/{tier}"] = float(zero[sel].sum() / tokens[sel].sum().clamp(min=1))
    return out
