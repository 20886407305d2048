"""The stages of one training step, in the order `train_step` runs them.

draw and score -> the usable samples -> training tensors and anchors -> (advantages,
`lmpo.trainer.advantage`) -> (update, `lmpo.trainer.update`) -> post-update diagnostics
-> the step's metrics. What differs between methods comes in through the run's parts:
the rollout controller (stopping, scoring a stopped response, its own diagnostics), the
batch filter, the estimator's family and the loss's post-update diagnostics.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from lmpo.masked import masked_mean
from lmpo.models.forward import (
    behaviour_head,
    distribution_gap,
    forward_logprobs,
    forward_path_stats,
)
from lmpo.rewards.multi import score_parts
from lmpo.rollout import IncrementalValues, RolloutContext, sample, sampling_mode
from lmpo.rollout.precision import mismatch_metrics
from lmpo.rollout.types import Rollout
from lmpo.trainer.batch import TrainBatch, score_rollout
from lmpo.trainer.filters import Drawn
from lmpo.trainer.greedy import add_greedy_baselines
from lmpo.trainer.length import kept_rows
from lmpo.trainer.setup import Run
from lmpo.trainer.update import autocast


@dataclass
class Clock:
    """Wall time of the step's stages: generation is summed over the rounds it took."""

    start: float = field(default_factory=time.perf_counter)
    generation: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str) -> None:
        self.marks[name] = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def times(self, generated: int) -> dict[str, float]:
        rollout_end = self.start + self.generation
        end = time.perf_counter()
        m = self.marks
        return {"time/rollout": self.generation, "time/scoring": m["scored"] - rollout_end,
                "time/controller": m["diagnosed"] - m["scored"],
                "time/update": m["updated"] - m["diagnosed"], "time/step": end - self.start,
                "time/tokens_per_s": generated / max(self.generation, 1e-9)}


def draw_and_score(step: int, run: Run, clock: Clock) -> tuple[Drawn, dict, dict]:
    """The step's generation rounds (as the batch filter asks), scored, and the rollout
    controller's diagnostics of them. Returns (drawn, filter metrics, controller metrics)."""
    cfg, state, rt = run.cfg, run.state, run.rt
    group, controller = cfg.rollout.group_size, state.controller
    # a stale rollout samples with the version `rollout.staleness` steps back (every round)
    weights = state.history.advance(state.policy) if state.history is not None else None

    def draw() -> Drawn:  # one generation round, scored
        t0 = time.perf_counter()
        problems = [p for p in state.sampler.next_batch() for _ in range(group)]
        values = IncrementalValues(state.critic) if controller.needs_values else None
        with sampling_mode(state.policy):
            rollout = sample(rt.rollout_model(weights), [rt.encode(p.prompt) for p in problems],
                             max_new_tokens=cfg.rollout.max_new_tokens,
                             temperature=cfg.rollout.temperature, eos_token_id=rt.stop_ids,
                             pad_token_id=rt.tokenizer.pad_token_id,
                             generator=state.rngs["sample"], value_fn=values, stopper=controller)
        clock.generation += time.perf_counter() - t0
        scored, correct, errors = score_rollout(rt.reward, problems, rollout.texts(rt.tokenizer),
                                             rollout.stop_reason,
                                             stop_score=controller.stop_score,
                                             on_error=cfg.scorer_errors)
        if rt.greedy_baselines:  # each prompt's greedy response, scored, where wanted
            t0 = time.perf_counter()
            with sampling_mode(state.policy):
                scored, rollout = add_greedy_baselines(rt.rollout_model(weights), rt, cfg,
                                                       problems, scored, rollout)
            clock.generation += time.perf_counter() - t0
        return Drawn(problems, rollout, scored, correct, errors)

    drawn, filter_metrics = rt.filter.collect(draw)
    clock.mark("scored")
    with sampling_mode(state.policy):  # the controller's diagnostics sample with the policy
        diag = controller.diagnose(RolloutContext(
            policy=state.policy, tokenizer=rt.tokenizer, problems=drawn.problems,
            rollout=drawn.rollout, max_new_tokens=cfg.rollout.max_new_tokens,
            temperature=cfg.rollout.temperature, seed=cfg.seed * 1_000_003 + step,
            reward=rt.reward, eos_ids=rt.stop_ids))
    clock.mark("diagnosed")
    return drawn, filter_metrics, diag


@dataclass
class Scored:
    """The samples that take part in the update: those with a score (None drops one)."""

    problems: list
    rollout: Rollout
    scores: torch.Tensor  # [B'] float32
    group_ids: torch.Tensor  # [B']
    generated_correct: torch.Tensor  # [B] exact correctness of every generated sample
    correct: torch.Tensor  # [B'] exact correctness of the scored samples (the update's rows)
    scorer_errors: int
    unscored: int
    generated: int  # samples generated (scored or not): update_share's denominator
    chosen: torch.Tensor | None = None  # [B'] bool: the rows a refill chose for the update
    parts: torch.Tensor | None = None  # [B', K] float64 each reward function's score
    part_weights: torch.Tensor | None = None  # [K] float64 their weights
    baselines: torch.Tensor | None = None  # [B'] float64 greedy-response scores


def usable(drawn: Drawn, group: int) -> Scored:
    """The scored samples of `drawn` (a sample its reward function scored None takes no
    part in the update, as in TRL); `scores` is empty when none is left."""
    group_ids = torch.arange(len(drawn.problems)) // group
    used = torch.tensor([i for i, s in enumerate(drawn.scored) if s is not None],
                        dtype=torch.long)
    rollout, problems, chosen = drawn.rollout, drawn.problems, drawn.chosen
    if 0 < len(used) < len(drawn.scored):
        rollout, group_ids = rollout.select(used), group_ids[used]
        problems = [problems[i] for i in used.tolist()]
        chosen = None if chosen is None else chosen[used]
    correct = torch.tensor([float(ok) for ok in drawn.correct])
    kept = [s for s in drawn.scored if s is not None]
    parts, weights = score_parts(kept)
    baselines = [getattr(s, "baseline", None) for s in kept]
    return Scored(problems, rollout, torch.tensor(kept, dtype=torch.float32),
                  group_ids, correct, correct[used] if len(used) else correct[:0],
                  drawn.scorer_errors, len(drawn.scored) - len(used), len(drawn.scored), chosen,
                  parts=parts, part_weights=weights,
                  baselines=None if None in baselines
                  else torch.tensor(baselines, dtype=torch.float64))


def training_batch(step: int, run: Run, scored: Scored) -> tuple[TrainBatch, dict]:
    """The update's tensors and anchors, over every scored sample: the behaviour log-probs
    (or their recompute), the pre-update log-probs where a diagnostic, the anchor or the
    run's rollout correction needs them (with `rollout/logp_mismatch`, its mean and _p99
    over tokens; where the sampler differs from the trained policy, a low-precision or
    stale rollout, also that policy's entropy), the correction's weights and mask, and the
    reference's log-probs where a KL needs them, and where the estimator wants them the
    policy's per-token path statistics (log-probs and sum_v pi_v^2, for the optimal token
    baseline). The recompute, the path statistics and the reference's pass run in the
    update's precision (optim.dtype; float32 by default), as verl's actor and reference
    compute theirs, so that the first ratio is 1 and the KL to an equal reference 0."""
    cfg, state, device, correction = run.cfg, run.state, run.rt.device, run.parts.correction
    differs, paths = run.rt.rollout_model.differs, run.rt.path_stats
    rollout, row = scored.rollout, {}
    ids, mask = (x.to(device) for x in rollout.full_sequences())
    resp_ids, resp_mask = rollout.response_ids.to(device), rollout.response_mask.to(device)
    old_logp, temperature = rollout.logp.to(device), cfg.rollout.temperature
    pre_update, pre_entropy, fixed, path_stats = None, None, None, None
    if paths:  # its log-probs are the recompute's, bit for bit: one pass serves both
        with torch.no_grad(), autocast(cfg, device):
            path_stats = forward_path_stats(state.policy, ids, mask, resp_ids, temperature)
    sampler_logp = old_logp if cfg.loss.seq_divergence_threshold is not None else None
    if cfg.rollout.old_logp == "recompute" or differs or correction is not None \
            or sampler_logp is not None or diagnostic_step(step, cfg):  # mask: pi_old vs mu
        if path_stats is not None and not differs:
            recomputed, entropy = path_stats[0], None
        else:
            with torch.no_grad(), autocast(cfg, device):
                recomputed, entropy = forward_logprobs(state.policy, ids, mask, resp_ids,
                                                       temperature, with_entropy=differs)
        if differs:  # the trained policy's entropy, not the rollout copy's
            pre_entropy = entropy * resp_mask
        row |= mismatch_metrics(old_logp, recomputed, resp_mask)
        if differs and cfg.log.full_mismatch and diagnostic_step(step, cfg):
            row |= full_mismatch(run, ids, mask, resp_ids, resp_mask)
        pre_update = recomputed * resp_mask
        if correction is not None:  # log pi_train - log pi_rollout, whatever anchors the ratio
            fixed = correction((recomputed - old_logp) * resp_mask, resp_mask)
            row |= fixed.metrics
        if cfg.rollout.old_logp == "recompute":
            old_logp = pre_update
    update_mask = None if fixed is None else fixed.mask
    if (keep_rows := kept_rows(rollout, cfg)) is not None:  # loss.mask_truncated
        update_mask = (resp_mask if update_mask is None else update_mask) \
            * keep_rows.to(resp_mask)[:, None]
    ref_logp = None
    if cfg.kl.coef > 0 or diagnostic_step(step, cfg):
        with torch.no_grad(), autocast(cfg, device):
            ref_logp, _ = forward_logprobs(state.reference, ids, mask, resp_ids, temperature,
                                           with_entropy=False)
    return TrainBatch(ids, mask, resp_ids, resp_mask, old_logp, adv=None,
                      keep=torch.arange(len(resp_ids)), ref_logp=ref_logp,
                      pre_update=pre_update, pre_entropy=pre_entropy,
                      sampler_logp=sampler_logp,
                      behaviour_head=sampler_head(run, ids, mask, resp_ids),
                      is_weights=None if fixed is None else fixed.weights,
                      update_mask=update_mask,
                      correct=scored.correct.to(device), group_ids=scored.group_ids.to(device),
                      kl_coef=None if state.schedules is None else state.schedules.kl_coef(),
                      paths=path_stats), row


def sampler_head(run: Run, ids, mask, resp_ids):
    """loss.centered_score's reading of the sampling distribution (its top
    loss.centered_score_k, or all of it for `full`): a no-grad pass of the model that
    sampled this batch (the low-precision or stale copy, else the policy before the
    update). None when score centering is off."""
    mode, rt = run.cfg.loss.centered_score, run.rt
    if mode is None:
        return None
    model = rt.rollout_model.copy if rt.rollout_model.differs else run.state.policy
    return behaviour_head(model, ids, mask, resp_ids, run.cfg.rollout.temperature,
                          None if mode == "full" else run.cfg.loss.centered_score_k)


def full_mismatch(run: Run, ids, mask, resp_ids, resp_mask) -> dict:
    """rollout/full_tv and rollout/full_kl: the masked means of `distribution_gap` between
    the model that sampled this batch and the float32 policy."""
    tv, kl = distribution_gap(run.rt.rollout_model.copy, run.state.policy, ids, mask,
                              resp_ids, run.cfg.rollout.temperature)
    return {"rollout/full_tv": float(masked_mean(tv, resp_mask)),
            "rollout/full_kl": float(masked_mean(kl, resp_mask))}


def diagnostic_step(step: int, cfg) -> bool:
    """Steps 1, 1 + N, 1 + 2N, ... (N = log.policy_kl_every) run the diagnostic passes."""
    return (step - 1) % cfg.log.policy_kl_every == 0


def after_update(step: int, run: Run, batch: TrainBatch) -> dict:
    """A float32 pass over the batch after the update, on diagnostic steps: the KL between
    consecutive policies (k3; a low-precision rollout's mismatch is rollout/logp_mismatch,
    not a step the update took) and the loss's post-update diagnostics; the KL to the
    reference wherever it exists."""
    cfg, state, parts, row = run.cfg, run.state, run.parts, {}
    if diagnostic_step(step, cfg):
        with torch.no_grad():
            new_logp, _ = forward_logprobs(state.policy, batch.ids, batch.mask,
                                           batch.resp_ids, cfg.rollout.temperature,
                                           with_entropy=False)
        step_rho = new_logp - batch.pre_update
        row["kl/consecutive"] = float(masked_mean(
            torch.exp(step_rho.clamp(-20, 20)) - 1 - step_rho, batch.resp_mask))
        for diagnostic in parts.post_update:
            row |= diagnostic(new_logp, batch.old_logp, batch.adv, batch.resp_mask)
    if batch.ref_logp is not None:
        row["kl/ref"] = float(masked_mean(batch.old_logp - batch.ref_logp, batch.resp_mask))
    return row


def population_metrics(scored: Scored, keep: torch.Tensor, entropy_tokens,
                       head_tokens: int = 0) -> dict:
    """What arms compare, over every generated sample: `policy/entropy`, the token-mean
    entropy at the sampling temperature of the float32 policy the update starts from (the
    sampler's, or for a low-precision rollout a float32 pass's, `entropy_tokens`), and the
    share of generated samples that enter the update. The kept subset's entropy has its own
    name, `policy/entropy_kept` (equal to `policy/entropy` where no filter drops samples).
    With `head_tokens` k > 0 (log.entropy_head_tokens), `policy/entropy_head`: the same
    token mean over each response's first k tokens only: where early and late tokens
    differ in entropy, the full mean moves with response length, and this one does not
    (for responses of at least k tokens)."""
    rollout = scored.rollout
    ent = entropy_tokens if entropy_tokens is not None else rollout.entropy
    ent, mask = ent.to(rollout.response_mask.device), rollout.response_mask
    keep = keep.to(mask.device)
    row = {"policy/entropy": float(masked_mean(ent, mask)),
           "policy/entropy_kept": float(masked_mean(ent[keep], mask[keep])),
           "data/update_share": len(keep) / max(scored.generated, 1)}
    if head_tokens > 0:
        row["policy/entropy_head"] = float(masked_mean(ent[:, :head_tokens],
                                                       mask[:, :head_tokens]))
    return row


def step_metrics(state, scored: Scored, lr: float) -> dict:
    """What every step logs about its samples, its tokens and its updates."""
    scores, generated = scored.scores, scored.rollout.num_generated
    state.counters.tokens += generated
    return {"reward/mean": float(scores.mean()) if len(scores) else 0.0,
            "reward/std": float(scores.std()) if len(scores) > 1 else 0.0,
            "reward/min": float(scores.min()) if len(scores) else 0.0,
            "reward/max": float(scores.max()) if len(scores) else 0.0,
            "reward/accuracy": float(scored.generated_correct.mean()),
            "tokens/generated": float(generated),
            "tokens/cumulative": float(state.counters.tokens),
            "response/length_mean": float(scored.rollout.lengths.float().mean()),
            "data/scorer_errors": float(scored.scorer_errors),
            "train/skipped_updates": float(state.counters.skipped), "lr": lr}
