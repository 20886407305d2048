"""`lmpo train`: one readable loop for every method.

rollout -> scores -> advantages -> K epochs of minibatch updates -> diagnostics
-> evaluation -> log -> checkpoint. The PPO family (advantage "gae") trains a
critic; the group family uses an estimator from lmpo.advantages. Every loss
comes from the lmpo.losses registry: no method is special-cased here.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

import torch

from lmpo.advantages import gae, get_advantage, nonzero_variance_groups
from lmpo.losses import aggregate, default_aggregation, get_loss, kl_penalty
from lmpo.masked import masked_mean, masked_whiten
from lmpo.models import ValueModel, load_policy, save_policy
from lmpo.rollout import ESPO, IncrementalValues, sample
from lmpo.tasks import Sampler, get_task
from lmpo.trainer.batch import (
    critic_values,
    explained_variance,
    finish_stopped,
    forward_logprobs,
    sampling_mode,
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
from lmpo.trainer.config import ConfigError, save_config
from lmpo.trainer.evaluate import evaluate, heldout_problems
from lmpo.trainer.train_config import TrainConfig


class NonFiniteError(RuntimeError):
    pass


def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          progress: bool = True) -> dict:
    """Run (or resume) `cfg` in `run_dir`; returns {"before": eval, "after": eval, ...}."""
    run_dir = Path(run_dir)
    metrics_path = run_dir / "metrics.jsonl"
    if not resume and read_rows(metrics_path):
        raise ConfigError(f"{run_dir} already holds a run (metrics.jsonl); pass --resume to "
                          "continue it or choose a new --run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)

    # ================================================================ setup
    policy, tok = load_policy(cfg.policy)
    policy.train()
    reference = copy.deepcopy(policy).eval().requires_grad_(False)  # frozen, in memory
    critic = ValueModel.from_policy(policy) if cfg.actor_critic else None
    task = get_task(cfg.task)
    group = cfg.rollout.group_size
    sampler = Sampler(training_pool(task, cfg), cfg.rollout.batch_size // group,
                      kind=cfg.rollout.sampler, seed=cfg.seed, order=task.clusters)
    estimator = None if cfg.actor_critic else get_advantage(cfg.advantage.name,
                                                            **cfg.advantage.hparams)
    loss_fn = get_loss(cfg.loss.name, **cfg.loss.hparams)
    agg = cfg.loss.agg or default_aggregation(cfg.loss.name)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.optim.lr,
                            weight_decay=cfg.optim.weight_decay)
    critic_opt = torch.optim.AdamW(critic.parameters(), lr=cfg.critic.lr) if critic else None
    espo_kw = {k: v for k, v in asdict(cfg.espo).items()
               if k not in ("enabled", "measure_false_positives")}
    espo = ESPO(**espo_kw, total_steps=cfg.steps, seed=cfg.seed) if cfg.espo.enabled else None
    sample_gen = torch.Generator().manual_seed(cfg.seed)
    shuffle_gen = torch.Generator().manual_seed(cfg.seed + 1)
    eval_problems = heldout_problems(task, cfg.log.eval_per_tier, cfg.seed)

    def run_eval():
        return evaluate(policy, tok, task, eval_problems,
                        max_new_tokens=cfg.log.eval_max_new_tokens)

    counters = {"tokens": 0, "nonfinite_streak": 0, "skipped": 0}
    start, before = 0, None
    ckpt = latest_checkpoint(run_dir) if resume else None
    if ckpt is not None:
        state = load_checkpoint(ckpt)
        start, before, counters = state["step"], state["before"], state["counters"]
        policy.load_state_dict(state["policy"])
        opt.load_state_dict(state["opt"])
        if critic:
            critic.load_state_dict(state["critic"])
            critic_opt.load_state_dict(state["critic_opt"])
        if estimator is not None:
            estimator.load_state_dict(state["estimator"])
        if espo is not None:
            espo.load_state_dict(state["espo"])
        sampler.load_state_dict(state["sampler"])
        sample_gen.set_state(state["sample_gen"])
        shuffle_gen.set_state(state["shuffle_gen"])
        torch.set_rng_state(state["torch_rng"])
    if metrics_path.exists():
        truncate_rows(metrics_path, start)
    save_config(cfg, run_dir / "config.yaml")
    writer = None
    if cfg.log.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(run_dir / "tb"), purge_step=start + 1)
    if before is None:
        before = run_eval()

    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(f"[bold]{cfg.loss.name}/{cfg.advantage.name}"), BarColumn(),
                   TextColumn("{task.completed}/{task.total} reward {task.fields[reward]:.3f} "
                              "acc {task.fields[acc]:.2f} H {task.fields[ent]:.3f} "
                              "{task.fields[tps]:.0f} tok/s"),
                   TimeElapsedColumn(), disable=not progress)
    job = bar.add_task("train", total=cfg.steps, completed=start, reward=0.0, acc=0.0, ent=0.0,
                       tps=0.0)
    bar.start()
    parts = {"policy": policy, "reference": reference, "critic": critic, "tok": tok,
             "task": task, "sampler": sampler, "estimator": estimator, "loss_fn": loss_fn,
             "agg": agg, "opt": opt, "critic_opt": critic_opt, "espo": espo,
             "sample_gen": sample_gen, "shuffle_gen": shuffle_gen, "counters": counters}
    try:
        for step in range(start + 1, cfg.steps + 1):
            row = train_step(step, cfg, parts)
            # ======================================================== evaluation
            if step % cfg.log.eval_every == 0 or step == cfg.steps:
                result = run_eval()
                row["eval/acc_mean"] = result["mean"]
                row |= {f"eval/acc/{k}": v for k, v in result["per_tier"].items()}
            # ======================================================== log
            append_row(metrics_path, row)
            if writer:
                for k, v in row.items():
                    if k != "step":
                        writer.add_scalar(k, v, step)
                writer.flush()
            bar.update(job, completed=step, reward=row["reward/mean"],
                       acc=row["reward/accuracy"], ent=row.get("policy/entropy", 0.0),
                       tps=row["time/tokens_per_s"])
            # ======================================================== checkpoint
            if step % cfg.log.checkpoint_every == 0 or step == cfg.steps:
                state = {
                    "step": step, "before": before, "counters": dict(counters),
                    "policy": policy.state_dict(), "opt": opt.state_dict(),
                    "critic": critic.state_dict() if critic else None,
                    "critic_opt": critic_opt.state_dict() if critic else None,
                    "estimator": estimator.state_dict() if estimator else None,
                    "espo": espo.state_dict() if espo else None,
                    "sampler": sampler.state_dict(), "sample_gen": sample_gen.get_state(),
                    "shuffle_gen": shuffle_gen.get_state(), "torch_rng": torch.get_rng_state(),
                }
                save_checkpoint(run_dir, step, state, keep=cfg.log.keep_checkpoints)
    finally:
        bar.stop()
        if writer:
            writer.close()

    # ================================================================ finish
    save_policy(policy, tok, run_dir / "policy")
    rows = read_rows(metrics_path)
    final = rows[-1] if rows else {}
    after = {"per_tier": {k.split("/", 2)[2]: v for k, v in final.items()
                          if k.startswith("eval/acc/")},
             "mean": final.get("eval/acc_mean", float("nan")), "n": len(eval_problems)}
    summary = {"before": before, "after": after, "steps": cfg.steps}
    (run_dir / "eval.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def training_pool(task, cfg: TrainConfig) -> list:
    """The fixed problem pool, spread evenly over `rollout.clusters` (or every tier)."""
    rng = random.Random(cfg.seed)
    clusters = cfg.rollout.clusters
    if not clusters:
        return task.sample(cfg.rollout.pool_size, rng)
    unknown = [c for c in clusters if c not in task.clusters]
    if unknown:
        raise ConfigError(f"rollout.clusters {unknown} unknown for task {cfg.task}; "
                          f"tiers: {', '.join(task.clusters)}")
    per = max(1, cfg.rollout.pool_size // len(clusters))
    return [p for c in clusters for p in task.sample(per, rng, cluster=c)]


def lr_at(step: int, cfg: TrainConfig) -> float:
    return cfg.optim.lr * min(1.0, step / max(1, cfg.optim.warmup_steps))


def train_step(step: int, cfg: TrainConfig, s: dict) -> dict:
    """One RL iteration; returns the step's metrics row."""
    policy, critic, tok, espo = s["policy"], s["critic"], s["tok"], s["espo"]
    counters = s["counters"]
    t_start = time.perf_counter()
    # ================================================================ rollout
    group = cfg.rollout.group_size
    problems = [p for p in s["sampler"].next_batch() for _ in range(group)]
    group_ids = torch.arange(len(problems)) // group
    value_fn = IncrementalValues(critic) if espo is not None and espo.needs_values else None
    with sampling_mode(policy):
        rollout = sample(policy, [tok.encode(p.prompt) for p in problems],
                         max_new_tokens=cfg.rollout.max_new_tokens,
                         temperature=cfg.rollout.temperature, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id, generator=s["sample_gen"],
                         value_fn=value_fn, stopper=espo)
    t_rollout = time.perf_counter()
    # ================================================================ scoring
    r_fail = espo.r_fail if espo is not None else 0.0
    scores, _, scorer_errors = score_rollout(s["task"], problems, tok, rollout, r_fail=r_fail,
                                             on_error=cfg.scorer_errors)
    t_score = time.perf_counter()
    espo_diag: dict[str, float] = {}
    if espo is not None and cfg.espo.measure_false_positives:  # with the rollout policy
        with sampling_mode(policy):
            espo_diag = finish_stopped(policy, tok, s["task"], problems, rollout,
                                       max_new_tokens=cfg.rollout.max_new_tokens,
                                       temperature=cfg.rollout.temperature,
                                       seed=cfg.seed * 1_000_003 + step)
    t_diag = time.perf_counter()
    # ================================================================ advantages
    ids, mask = rollout.full_sequences()
    resp_ids, resp_mask, old_logp = rollout.response_ids, rollout.response_mask, rollout.logp
    b, t = resp_ids.shape
    row: dict = {"step": step}
    diagnose = (step - 1) % cfg.log.policy_kl_every == 0
    need_ref = cfg.kl.coef > 0 or diagnose
    ref_logp = None
    if need_ref:
        with torch.no_grad():
            ref_logp, _ = forward_logprobs(s["reference"], ids, mask, resp_ids,
                                           cfg.rollout.temperature, with_entropy=False)
    keep = torch.arange(b)
    if critic is not None:
        with torch.no_grad():
            old_values = critic_values(critic, ids, mask, t) * resp_mask
        rewards = torch.zeros(b, t)
        rewards[torch.arange(b), rollout.lengths - 1] = scores
        if cfg.kl.coef > 0 and cfg.kl.mode == "reward":
            rewards = rewards - cfg.kl.coef * (old_logp - ref_logp) * resp_mask
        adv, returns = gae(rewards, old_values, resp_mask, gamma=cfg.advantage.gamma,
                           lam=cfg.advantage.lam)
        if cfg.advantage.whiten:
            adv = masked_whiten(adv, resp_mask)
        row |= {"adv/mean": float(masked_mean(adv, resp_mask)),
                "adv/abs_max": float((adv * resp_mask).abs().max()),
                "value/explained_variance": explained_variance(old_values, returns, resp_mask)}
    else:
        seq_adv, adv_metrics = s["estimator"](scores, group_ids)
        row |= adv_metrics
        if cfg.rollout.dynamic_sampling:
            keep, dropped = nonzero_variance_groups(scores, group_ids)
            row["data/groups_dropped"] = float(dropped)
        adv = seq_adv[:, None].expand(b, t)
    # ================================================================ update
    sums: dict[str, float] = defaultdict(float)
    updates = 0
    for _epoch in range(cfg.optim.epochs):
        perm = keep[torch.randperm(len(keep), generator=s["shuffle_gen"])]
        for mb in perm.chunk(cfg.optim.minibatches) if len(perm) else []:
            # global counts of the minibatch: micro-batch losses add up to its loss; the
            # Dr. GRPO horizon is the fixed generation budget, not this batch's longest row
            counts = {"num_tokens": resp_mask[mb].sum(),
                      "num_seqs": (resp_mask[mb].sum(-1) > 0).sum(),
                      "horizon": cfg.rollout.max_new_tokens}
            s["opt"].zero_grad(set_to_none=True)
            if critic is not None:
                s["critic_opt"].zero_grad(set_to_none=True)
            bad = None
            for micro in mb.split(cfg.optim.micro_batch_size):
                m = resp_mask[micro]
                logp, ent = forward_logprobs(policy, ids[micro], mask[micro], resp_ids[micro],
                                             cfg.rollout.temperature)
                loss_tok, loss_metrics = s["loss_fn"](logp, old_logp[micro], adv[micro], m)
                terms = {"policy": aggregate(loss_tok, m, s["agg"], **counts)}
                if cfg.kl.coef > 0 and cfg.kl.mode == "loss":
                    kl_tok = kl_penalty(logp, ref_logp[micro], cfg.kl.kind)
                    terms["kl"] = cfg.kl.coef * aggregate(kl_tok, m, s["agg"], **counts)
                if cfg.optim.entropy_coef:
                    terms["entropy"] = -cfg.optim.entropy_coef * aggregate(ent, m, s["agg"],
                                                                           **counts)
                if critic is not None:
                    v = critic_values(critic, ids[micro], mask[micro], t)
                    v_old, ret = old_values[micro], returns[micro]
                    vl = (v - ret).square()
                    if cfg.critic.value_clip is not None:
                        c = cfg.critic.value_clip
                        vl = torch.maximum(vl, (v_old + (v - v_old).clamp(-c, c) - ret).square())
                    terms["value"] = cfg.critic.value_coef * 0.5 * aggregate(
                        vl, m, "token-mean", num_tokens=counts["num_tokens"])
                    sums["value/loss"] += float(terms["value"].detach()) / cfg.critic.value_coef
                bad = bad or next((k for k, x in terms.items() if not torch.isfinite(x)), None)
                if bad:
                    break
                sum(terms.values()).backward()
                frac = len(micro) / len(mb)
                for k, x in loss_metrics.items():
                    sums["loss/" + k] += x * frac
                for k, x in terms.items():
                    sums["loss/term_" + k] += float(x.detach())
                sums["policy/entropy"] += float(masked_mean(ent.detach(), m)) * frac
            grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.optim.grad_clip)
            if bad is None and not torch.isfinite(grad_norm):
                bad = "policy gradient"
            if bad is not None:
                counters["nonfinite_streak"] += 1
                counters["skipped"] += 1
                if counters["nonfinite_streak"] >= cfg.max_nonfinite:
                    raise NonFiniteError(
                        f"step {step}: the {bad} term went non-finite in "
                        f"{counters['nonfinite_streak']} consecutive updates")
                continue
            counters["nonfinite_streak"] = 0
            for group_ in s["opt"].param_groups:
                group_["lr"] = lr_at(step, cfg)
            s["opt"].step()
            if critic is not None:
                torch.nn.utils.clip_grad_norm_(critic.parameters(), cfg.optim.grad_clip)
                s["critic_opt"].step()
            sums["grad/norm"] += float(grad_norm)
            updates += 1
    t_update = time.perf_counter()
    # ================================================================ diagnostics
    n_mb = max(1, cfg.optim.epochs * cfg.optim.minibatches)
    row |= {k: v / n_mb for k, v in sums.items() if k != "grad/norm"}
    row["grad/norm"] = sums["grad/norm"] / max(1, updates)
    if critic is not None and espo is not None:
        espo.observe_value_loss(row.get("value/loss", math.inf), step)
    if diagnose or updates == 0:
        with torch.no_grad():
            new_logp, ent = forward_logprobs(policy, ids, mask, resp_ids, cfg.rollout.temperature)
        if updates == 0:  # nothing trained (all groups dropped / skipped): same policy
            row["policy/entropy"] = float(masked_mean(ent, resp_mask))
        if diagnose:
            r = torch.exp((new_logp - old_logp).clamp(-20, 20))
            row["kl/consecutive"] = float(masked_mean(r - 1 - (new_logp - old_logp), resp_mask))
    if ref_logp is not None:
        row["kl/ref"] = float(masked_mean(old_logp - ref_logp, resp_mask))
    generated = rollout.num_generated
    counters["tokens"] += generated
    solved = (scores == 1).float()
    row |= {
        "reward/mean": float(scores.mean()), "reward/std": float(scores.std()) if b > 1 else 0.0,
        "reward/accuracy": float(solved.mean()),
        "tokens/generated": float(generated), "tokens/cumulative": float(counters["tokens"]),
        "response/length_mean": float(rollout.lengths.float().mean()),
        "data/scorer_errors": float(scorer_errors), "train/updates": float(updates),
        "train/skipped_updates": float(counters["skipped"]), "lr": lr_at(step, cfg),
    }
    if espo is not None:
        row |= espo.metrics()
        stopped = [i for i, r_ in enumerate(rollout.stop_reason) if r_ == "early_stop"]
        row["espo/stopped"] = float(len(stopped))
        row["espo/stop_position_mean"] = float(rollout.lengths[stopped].float().mean()) \
            if stopped else 0.0
    t_end = time.perf_counter()
    row |= espo_diag
    row |= {"time/rollout": t_rollout - t_start, "time/scoring": t_score - t_rollout,
            "time/espo_diagnostics": t_diag - t_score, "time/update": t_update - t_diag,
            "time/step": t_end - t_start,
            "time/tokens_per_s": generated / max(t_rollout - t_start, 1e-9)}
    return row
