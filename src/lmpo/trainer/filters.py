"""Batch filters: which generated samples enter the update.

A filter is a component of the run (`build_filter`) with two calls: `collect(draw)`
runs the generation rounds of one step (one `draw()`, or more to refill what it drops)
and returns every sample they generated, and `select(scored)` names the samples that take
part in the update, each call with its own metrics. Metrics that arms compare are computed
over every generated sample (the same population in every arm); the update trains on the
kept ones. `KeepAll` keeps everything. `VariedGroups` is dynamic sampling
(`rollout.dynamic_sampling`): a group whose rewards are all equal has zero advantage, so
it is dropped; with `rollout.max_gen_batches` > 1 more prompt batches are generated
(verl's `max_num_gen_batches`) until `batch_size / G` varied groups are kept or that many
rounds have run (then the step trains on the groups it has: never silent,
`data/gen_batches` and `data/groups_dropped` say what happened). Surplus varied groups
of the last round are not used (`data/groups_unused`). Every generated token counts in
`tokens/generated`: refilling is what dynamic sampling costs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

from lmpo.advantages import nonzero_variance_groups
from lmpo.rollout.types import Rollout


@dataclass
class Drawn:
    """A step's generated samples: the problems (G copies each), rollout and scores, of
    one generation round or of every round a refill ran (the whole population: metrics that
    arms compare cover it). `chosen` marks the rows a refill chose for the update (None: the
    filter's `select` decides)."""
    problems: list
    rollout: Rollout
    scored: list[float | None]
    correct: list[bool]  # exact correctness of every drawn sample
    scorer_errors: int
    chosen: torch.Tensor | None = None  # [B] bool


def varied_groups(scored: list[float | None], group: int) -> list[int]:
    """Indices of the groups (consecutive runs of `group` samples) whose scores are not all
    equal; samples scored None take no part."""
    out = []
    for q in range(len(scored) // group):
        vals = {s for s in scored[q * group:(q + 1) * group] if s is not None}
        if len(vals) > 1:
            out.append(q)
    return out


def refill(first: Drawn, draw: Callable[[], Drawn], *, group: int, max_batches: int,
           pad_token_id: int) -> tuple[Drawn, dict]:
    """Draw rounds until the varied groups of `first` and the further `draw()` rounds fill
    the batch's number of groups or `max_batches` rounds have run. Returns every round's
    samples as one (the population), with `chosen` marking the first `batch_size / G` varied
    groups in the order drawn, and the metrics: reward and accuracy over *every* generated
    sample (the policy's, not the filtered batch's)."""
    want = len(first.problems) // group
    rounds, kept, dropped = [first], [], 0
    while True:
        d = rounds[-1]
        varied = varied_groups(d.scored, group)
        dropped += len(d.scored) // group - len(varied)
        kept += [(len(rounds) - 1, q) for q in varied]
        if len(kept) >= want or len(rounds) >= max_batches:
            break
        rounds.append(draw())
    unused = max(0, len(kept) - want)
    offsets = [sum(len(d.scored) for d in rounds[:r]) for r in range(len(rounds))]
    chosen = torch.zeros(offsets[-1] + len(rounds[-1].scored), dtype=torch.bool)
    for r, q in kept[:want]:
        chosen[offsets[r] + q * group: offsets[r] + (q + 1) * group] = True
    every = [s for d in rounds for s in d.scored if s is not None]
    correct = [h for d in rounds for h in d.correct]
    metrics = {"data/gen_batches": float(len(rounds)), "data/groups_dropped": float(dropped),
               "data/groups_unused": float(unused),
               "reward/mean": sum(every) / len(every) if every else 0.0,
               "reward/std": statistics.stdev(every) if len(every) > 1 else 0.0,
               "reward/accuracy": sum(correct) / len(correct)}
    generated = sum(d.rollout.num_generated for d in rounds)
    population = Drawn(
        problems=[p for d in rounds for p in d.problems],
        rollout=concat([d.rollout for d in rounds], pad_token_id, generated),
        scored=[s for d in rounds for s in d.scored], correct=correct,
        scorer_errors=sum(d.scorer_errors for d in rounds), chosen=chosen)
    return population, metrics


def _pad(x: torch.Tensor, width: int, value, left: bool = False) -> torch.Tensor:
    extra = width - x.shape[1]
    if extra == 0:
        return x
    fill = torch.full((x.shape[0], extra), value, dtype=x.dtype, device=x.device)
    return torch.cat([fill, x] if left else [x, fill], dim=1)


def concat(parts: list[Rollout], pad_token_id: int, num_generated: int) -> Rollout:
    """Rows of several rollouts as one: prompts left-padded and responses right-padded to
    the widest; `num_generated` is the tokens generated by every round."""
    p = max(r.prompt_ids.shape[1] for r in parts)
    t = max(r.response_ids.shape[1] for r in parts)
    values = None if any(r.values is None for r in parts) else \
        torch.cat([_pad(r.values, t, 0.0) for r in parts])
    return Rollout(
        prompt_ids=torch.cat([_pad(r.prompt_ids, p, pad_token_id, left=True) for r in parts]),
        prompt_mask=torch.cat([_pad(r.prompt_mask, p, 0, left=True) for r in parts]),
        response_ids=torch.cat([_pad(r.response_ids, t, pad_token_id) for r in parts]),
        response_mask=torch.cat([_pad(r.response_mask, t, 0.0) for r in parts]),
        logp=torch.cat([_pad(r.logp, t, 0.0) for r in parts]),
        regret=torch.cat([_pad(r.regret, t, 0.0) for r in parts]),
        values=values, stop_reason=[s for r in parts for s in r.stop_reason],
        num_generated=num_generated, lengths=torch.cat([r.lengths for r in parts]),
        entropy=None if any(r.entropy is None for r in parts) else
        torch.cat([_pad(r.entropy, t, 0.0) for r in parts]))


class KeepAll:
    """No filter: one generation round, every sample in the update."""

    def collect(self, draw: Callable[[], Drawn]) -> tuple[Drawn, dict]:
        return draw(), {}

    def select(self, scored) -> tuple[torch.Tensor, dict]:
        return torch.arange(len(scored.scores)), {}


@dataclass
class VariedGroups:
    """Dynamic sampling: drop the groups whose rewards are all equal, refilling the batch
    for up to `max_batches` generation rounds (1 = drop without refill)."""

    group: int
    max_batches: int
    pad_token_id: int

    def collect(self, draw: Callable[[], Drawn]) -> tuple[Drawn, dict]:
        first = draw()
        if self.max_batches == 1:
            return first, {}
        return refill(first, draw, group=self.group, max_batches=self.max_batches,
                      pad_token_id=self.pad_token_id)

    def select(self, scored) -> tuple[torch.Tensor, dict]:
        """The varied groups (of those a refill chose, if it ran); a refill's own
        data/groups_dropped count wins over this one."""
        keep, dropped = nonzero_variance_groups(scored.scores, scored.group_ids)
        if scored.chosen is not None:
            keep = keep[scored.chosen[keep]]
        return keep, {"data/groups_dropped": float(dropped)}


FILTER_KEYS = ("rollout.dynamic_sampling", "rollout.max_gen_batches")  # the filter's config


def build_filter(rollout_cfg, pad_token_id: int):
    """The filter `rollout.dynamic_sampling` / `rollout.max_gen_batches` ask for."""
    if not rollout_cfg.dynamic_sampling:
        return KeepAll()
    return VariedGroups(rollout_cfg.group_size, rollout_cfg.max_gen_batches, pad_token_id)



# What a filter changes by design (`lmpo.experiments.stats.seeds.EFFECTIVE`): a claim whose arms
# differ in one of these keys is never confounded by it.
MEDIATES = {"rollout.dynamic_sampling": ("update_share", "rollout_tokens"),
            "rollout.max_gen_batches": ("rollout_tokens",)}
