"""`lmpo train`: one readable loop for every method.

rollout -> scores -> advantages -> K epochs of minibatch updates -> diagnostics
-> evaluation -> log -> checkpoint. What differs between methods comes from the
registries and their metadata (the loss and its post-update diagnostics, the estimator
and its family, the rollout controller) and from the batch filter; no method is named
here. The stages live in `lmpo.trainer.stages`, the run's setup in
`lmpo.trainer.setup`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from lmpo.atomic import write_text
from lmpo.evaluate import metrics_row, result_from_row
from lmpo.faults import crash_point
from lmpo.locks import check_lease
from lmpo.models import save_policy
from lmpo.models.adapters import merged_copy
from lmpo.trainer.advantage import update_advantage_size
from lmpo.trainer.checkpoint import append_row, read_rows, save_checkpoint
from lmpo.trainer.length import shape_scores
from lmpo.trainer.setup import Run, open_run, progress_bar, training_pool
from lmpo.trainer.stages import (
    Clock,
    after_update,
    diagnostic_step,
    draw_and_score,
    population_metrics,
    step_metrics,
    training_batch,
    usable,
)
from lmpo.trainer.stops import StepEndStop
from lmpo.trainer.train_config import TrainConfig
from lmpo.trainer.update import NonFiniteError, update
from lmpo.warmstart import resolve_policy

__all__ = ["NonFiniteError", "train", "train_step", "training_pool"]


def train(cfg: TrainConfig, run_dir: str | Path, *, resume: bool = False,
          progress: bool = True, verbose: bool | None = None) -> dict:
    """Run (or resume) `cfg` in `run_dir`; returns {"before": eval, "after": eval, ...}.

    `progress` shows the progress bars; `verbose` (default: as `progress`) prints the
    held-out counts."""
    # may build a warm start (its seed's own draw with policy_seed)
    policy_dir = resolve_policy(cfg.policy, progress=progress, seed=cfg.policy_seed)
    run = open_run(cfg, Path(run_dir), policy_dir, resume=resume, progress=progress,
                   verbose=progress if verbose is None else verbose)
    state = run.state
    bar = progress_bar(cfg, state.step, progress)
    stops = StepEndStop().install()  # Ctrl-C: finish the step, checkpoint it, stop
    try:
        for step in range(state.step + 1, cfg.steps + 1):
            row = train_step(step, run)
            # ======================================================== evaluation
            if step % cfg.log.eval_every == 0 or step == cfg.steps:
                started = time.perf_counter()
                result = run.evaluate()
                row |= metrics_row(result)
                row["time/eval"] = time.perf_counter() - started
                if step == cfg.steps:  # the final policy's per-sample records: eval.json
                    state.final = result.get("records")
            # ======================================================== log
            crash_point("before_row", step)
            check_lease(run.dir)  # a run moved to another machine has one writer
            append_row(run.metrics_path, row)
            crash_point("after_row", step)
            run.log_scalars(row, step)
            bar.update(completed=step, reward=row["reward/mean"],
                       acc=row["reward/accuracy"], ent=row.get("policy/entropy", 0.0),
                       tps=row["time/tokens_per_s"])
            # ======================================================== checkpoint
            state.step = step
            stopping = stops.pending and step < cfg.steps
            if step % cfg.log.checkpoint_every == 0 or step == cfg.steps or stopping:
                check_lease(run.dir)
                save_checkpoint(run.dir, step, state.state_dict(), keep=cfg.log.keep_checkpoints)
                crash_point("after_checkpoint", step)
            if stopping:
                stops.stop(step)
    finally:
        stops.restore()
        bar.stop()
        run.close()
    return finish(cfg, run)


def finish(cfg: TrainConfig, run: Run) -> dict:
    """The final policy (LoRA adapters folded in) and eval.json."""
    check_lease(run.dir)
    save_policy(merged_copy(run.state.policy), run.rt.tokenizer, run.dir / "policy")
    rows = read_rows(run.metrics_path)
    final = rows[-1] if rows else {}
    before = run.state.before
    after = result_from_row(final, before) | (
        {"records": run.state.final} if run.state.final else {})
    summary = {"before": before, "after": after, "steps": cfg.steps,
               "heldout": {k: vars(c) for k, c in run.heldout.counts.items()}}
    write_text(run.dir / "eval.json", json.dumps(summary, indent=2) + "\n")
    return summary


def lr_at(step: int, cfg: TrainConfig) -> float:
    return cfg.optim.lr * min(1.0, step / max(1, cfg.optim.warmup_steps))


def train_step(step: int, run: Run) -> dict:
    """One RL iteration of the open run; returns the step's metrics row."""
    cfg, state, parts, rt = run.cfg, run.state, run.parts, run.rt
    clock = Clock()
    # ================================================================ draw and score
    drawn, filter_metrics, controller_diag = draw_and_score(step, run, clock)
    scored = usable(drawn, cfg.rollout.group_size)
    row: dict = {"step": step, "data/reward_none": float(scored.unscored)}
    if not len(scored.scores):  # nothing to learn from: no update, the step is still logged
        state.counters.tokens += scored.rollout.num_generated
        return row | {"reward/mean": 0.0,
                      "reward/accuracy": float(scored.generated_correct.mean()),
                      "tokens/generated": float(scored.rollout.num_generated),
                      "tokens/cumulative": float(state.counters.tokens), "train/updates": 0.0,
                      "time/step": clock.elapsed(), "time/tokens_per_s": 0.0}
    row |= shape_scores(scored, cfg)  # reward.overlong, loss.mask_truncated
    batch, anchors = training_batch(step, run, scored)
    batch.keep, kept = rt.filter.select(scored)
    row |= anchors | kept | population_metrics(
        scored, batch.keep, batch.pre_entropy, cfg.log.entropy_head_tokens)
    # ================================================================ advantages
    row |= parts.advantages(state, batch, scored, cfg) | update_advantage_size(batch)
    observers = state.observers  # same-batch comparators (log.comparators), ...
    for obs in observers:
        obs.begin_step(state, batch, scored, cfg, diagnostic=diagnostic_step(step, cfg))
    # ================================================================ update
    row |= update(state, batch, parts.objective, cfg, lr=lr_at(step, cfg), step=step,
                  observers=observers)
    clock.mark("updated")
    # ================================================================ diagnostics
    row |= after_update(step, run, batch)
    # ================================================================ log
    # with a refill, the filter's reward/* cover every generated sample
    row |= step_metrics(state, scored, lr_at(step, cfg)) | filter_metrics \
        | rt.reward.pop_metrics() | controller_diag
    if state.ref_sync is not None:  # after the step's KL was read against the old one
        row |= state.ref_sync.step_end(step)
    state.controller.observe(row, step)
    row |= state.controller.metrics()
    for obs in observers:
        row |= obs.end_step(row, step)
    return row | clock.times(scored.rollout.num_generated)
