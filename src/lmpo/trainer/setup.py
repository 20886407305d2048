"""Opening a run: checks before any work, the policy and its parts, the run's state
(`RunState`, resumed from the newest checkpoint), the held-out set, the logs."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lmpo import process_env
from lmpo.config import ConfigError, save_config, to_dict
from lmpo.devices import resolve_device
from lmpo.errors import LockedError
from lmpo.evaluate import evaluate
from lmpo.faults import CRASH_ENV, parse_crash_spec
from lmpo.locks import directory_lock
from lmpo.models import ValueModel, load_policy
from lmpo.progress import LoopProgress
from lmpo.rollout.controllers.base import BelowFailure
from lmpo.tasks import Sampler, Task, get_task
from lmpo.tasks.heldout import HeldOut, heldout_split, sample_excluding
from lmpo.trainer.checkpoint import (
    latest_intact_checkpoint,
    load_checkpoint,
    read_rows,
    truncate_rows,
)
from lmpo.trainer.comparators import build_comparator_observer
from lmpo.trainer.history import PolicyHistory
from lmpo.trainer.parts import (
    Parts,
    build_controller_of,
    build_estimator,
    build_parts,
    build_schedules_of,
)
from lmpo.trainer.ref_sync import build_reference_sync
from lmpo.trainer.resume import check_resumable
from lmpo.trainer.runtime import Runtime, adamw, prepare_policy
from lmpo.trainer.state import RunState
from lmpo.trainer.trackers import WandbTracker
from lmpo.trainer.train_config import TrainConfig

if TYPE_CHECKING:  # imported where a run asks for TensorBoard
    from torch.utils.tensorboard import SummaryWriter


@dataclass
class Run:
    """An open run: its directory, config, parts, state and logs."""

    dir: Path
    cfg: TrainConfig
    parts: Parts
    task: Task
    rt: Runtime
    heldout: HeldOut
    state: RunState
    writer: SummaryWriter | None = None  # TensorBoard, when log.tensorboard
    tracker: WandbTracker | None = None  # Weights & Biases, when log.wandb
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)  # the lock

    @property
    def metrics_path(self) -> Path:
        return self.dir / "metrics.jsonl"

    def evaluate(self, cache: bool = False) -> dict:
        """The held-out evaluation of the policy as it is; with `cache`, read from (or kept
        in) the evaluation cache (`lmpo.eval_cache`), as the starting policy's is."""
        cfg, rt = self.cfg, self.rt
        return evaluate(self.state.policy, rt.tokenizer, self.task, self.heldout.problems,
                        max_new_tokens=cfg.log.eval_max_new_tokens,
                        trained_tiers=cfg.rollout.clusters,
                        temperature=cfg.log.eval_temperature, samples=cfg.log.eval_samples,
                        reward=rt.reward, encode=rt.encode, eos_ids=rt.stop_ids, cache=cache,
                        stream=cfg.log.eval_stream)

    def log_scalars(self, row: dict, step: int) -> None:
        if self.tracker:
            self.tracker.log(row, step)
        if self.writer:
            for k, v in row.items():
                if k != "step":
                    self.writer.add_scalar(k, v, step)
            self.writer.flush()

    def close(self) -> None:
        if self.tracker:
            self.tracker.close()
        if self.writer:
            self.writer.close()
        self.held.close()


def open_run(cfg: TrainConfig, run_dir: Path, policy_dir: Path, *, resume: bool,
             progress: bool, verbose: bool) -> Run:
    """Check, lock, build and (with `resume`) restore the run in `run_dir` from the policy
    in `policy_dir` (resolved before: a warm start is built before any run directory is
    opened, `lmpo.warmstart.resolve_policy`); evaluate the starting policy once (kept in
    the state, so a resumed run does not redo it). The run holds `run_dir`'s lock
    (`lmpo.locks`) until `Run.close`. A directory this call created is removed again if
    the run cannot start (a task file, a reward function or a checkpoint that fails): a
    bad input leaves nothing behind."""
    parse_crash_spec(os.environ.get(CRASH_ENV))  # a malformed spec fails before any work
    fresh = not run_dir.exists()
    held = contextlib.ExitStack()
    try:  # the directory first: one that cannot be written fails before any work
        held.enter_context(directory_lock(run_dir, what="lmpo train"))
        run = restore_run(cfg, run_dir, policy_dir, resume=resume, progress=progress,
                          verbose=verbose)
    except BaseException as exc:
        held.close()
        if fresh and not isinstance(exc, LockedError):
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    run.held = held
    return run


def restore_run(cfg: TrainConfig, run_dir: Path, policy_dir: Path, *, resume: bool,
                progress: bool, verbose: bool) -> Run:
    """Under the lock: the checks that read the directory, the parts, the state."""
    metrics_path = run_dir / "metrics.jsonl"
    if not resume and read_rows(metrics_path):
        raise ConfigError(f"{run_dir} already holds a run (metrics.jsonl); pass --resume to "
                          "continue it or choose a new --run-dir")
    ckpt = latest_intact_checkpoint(run_dir) if resume else None
    if resume:
        check_resumable(run_dir / "config.yaml", cfg)
    process_env.set_torch_threads(cfg.threads)
    process_env.write(run_dir)
    torch.manual_seed(cfg.seed)
    run = build_run(cfg, run_dir, policy_dir, progress=progress)
    if verbose:
        print(f"held-out set ({cfg.task}): {run.heldout.describe()}", flush=True)
    if ckpt is not None:
        run.state.load_state_dict(load_checkpoint(ckpt))
    if metrics_path.exists():
        truncate_rows(metrics_path, run.state.step)
    save_config(cfg, run_dir / "config.yaml")
    if cfg.log.tensorboard:
        from torch.utils.tensorboard import SummaryWriter

        run.writer = SummaryWriter(str(run_dir / "tb"), purge_step=run.state.step + 1)
    if cfg.log.wandb:

        run.tracker = WandbTracker(cfg.log.wandb, run_dir, to_dict(cfg))
    if run.state.before is None:  # every run from this policy evaluates it alike: cached
        run.state.before = run.evaluate(cache=True)
    return run


def build_run(cfg: TrainConfig, run_dir: Path, policy_dir: Path, *, progress: bool) -> Run:
    """The policy, its reference and critic, the task, the runtime and a fresh state."""
    estimator, controller = build_estimator(cfg), build_controller_of(cfg)
    for note in getattr(controller, "notes", ()):  # allowed, but worth saying

        warnings.warn(note, BelowFailure, stacklevel=2)
    policy, tok = load_policy(policy_dir)
    policy.to(resolve_device(cfg.device)).train()
    critic = ValueModel.from_policy(policy, init=cfg.critic.init, seed=cfg.seed) \
        if cfg.actor_critic else None  # before adapters
    policy, reference = prepare_policy(policy, cfg)
    task = get_task(cfg.task, cfg.task_params or None)
    rt = Runtime.build(cfg, policy, tok, task, progress=progress)
    heldout = heldout_split(task, cfg.log.eval_per_tier)
    parts = build_parts(cfg, critic)
    state = RunState(
        policy=policy, reference=reference,
        opt=adamw([p for p in policy.parameters() if p.requires_grad],
                  lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay),
        sampler=Sampler(training_pool(task, cfg, heldout.prompts),
                        cfg.rollout.batch_size // cfg.rollout.group_size,
                        kind=cfg.rollout.sampler, seed=cfg.seed, order=task.clusters),
        estimator=estimator, critic=critic,
        critic_opt=adamw(critic.parameters(), lr=cfg.critic.lr) if critic else None,
        controller=controller, reward_norm=getattr(rt.reward, "normalizer", None),
        history=PolicyHistory(cfg.rollout.staleness) if cfg.rollout.staleness else None,
        schedules=build_schedules_of(cfg),
        ref_sync=build_reference_sync(cfg, reference, policy),
        observers=[obs for obs in (build_comparator_observer(cfg, parts.loss_fn),)
                   if obs is not None],
        rngs={"sample": torch.Generator().manual_seed(cfg.seed),
              "shuffle": torch.Generator().manual_seed(cfg.seed + 1)})
    return Run(run_dir, cfg, parts, task, rt, heldout, state)


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


def progress_bar(cfg: TrainConfig, done: int, progress: bool) -> LoopProgress:
    """The run's progress (reward, accuracy, entropy, tokens per second): a live bar on a
    terminal, a line at a cadence off one (`lmpo.progress`)."""
    return LoopProgress(f"train {cfg.loss.name}/{cfg.advantage.name}",
                        "reward {reward:.3f} acc {acc:.2f} H {ent:.3f} {tps:.0f} tok/s",
                        cfg.steps, completed=done, enabled=progress, reward=0.0, acc=0.0,
                        ent=0.0, tps=0.0).start()
