"""A held-out evaluation set that is really held out, and the same for every seed.

Per tier, the held-out problems are the first distinct prompts of a stream
drawn with a fixed seed (`HELDOUT_SEED`, never the training seed). Their
number is `per_tier`, capped at `MAX_HELDOUT_FRAC` of the tier's distinct
problems, so a small tier (chain-sum t2d1 has 200) keeps most of its problems
for training. Every training draw (the RL pool and SFT batches) skips the
held-out prompts.

The distinct count comes from the task when it can enumerate a tier (a JSONL
file), otherwise from `PROBE` seeded draws: a tier whose probe repeats itself
so heavily that d * exp(-PROBE / d), the expected number of problems it missed,
is below 0.01, has been enumerated; otherwise the count is a lower bound, shown
as ">= n".
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from lmpo.tasks.base import Problem

HELDOUT_SEED = 1_000_003
PROBE = 4000
MAX_HELDOUT_FRAC = 0.25


@dataclass
class TierCount:
    distinct: int  # distinct prompts (exact, or a lower bound when `exact` is False)
    exact: bool
    heldout: int
    capped: bool  # too few distinct problems for the requested held-out size

    def describe(self) -> str:
        shown = f"{self.distinct}" if self.exact else f">= {self.distinct}"
        note = (f" (too few distinct problems for a full held-out set: "
                f"{MAX_HELDOUT_FRAC:.0%} of them held out)") if self.capped else ""
        return f"{shown} distinct, {self.heldout} held out{note}"


@dataclass
class HeldOut:
    problems: list[Problem]  # ordered by tier, then by draw
    counts: dict[str, TierCount] = field(default_factory=dict)

    @property
    def prompts(self) -> frozenset[str]:
        return frozenset(p.prompt for p in self.problems)

    def describe(self) -> str:
        return "; ".join(f"{tier}: {c.describe()}" for tier, c in self.counts.items())


def _distinct(problems) -> list[Problem]:
    seen: dict[str, Problem] = {}
    for p in problems:
        seen.setdefault(p.prompt, p)
    return list(seen.values())


# A generated tier's probe is a pure function of the task's definition and the seed: a
# process that opens many runs (a test session, a notebook) draws each one once.
_PROBES: dict[tuple, list[Problem]] = {}


def _probe(task, tier: str, seed: int) -> list[Problem]:
    """The distinct problems of `PROBE` seeded draws from `tier`, memoised when the task
    names what its draws depend on (`draw_key(tier)`, hashable)."""
    key_of = getattr(task, "draw_key", None)
    key = None if key_of is None else (key_of(tier), seed, PROBE)
    if key is None or key not in _PROBES:
        found = _distinct(task.sample(PROBE, random.Random(f"{seed}:{tier}"), cluster=tier))
        if key is None:
            return found
        _PROBES[key] = found
    return list(_PROBES[key])


def heldout_split(task, per_tier: int, *, seed: int = HELDOUT_SEED) -> HeldOut:
    """The fixed held-out problems of every tier of `task` (independent of any training seed)."""
    if per_tier < 1:
        raise ValueError(f"per_tier must be >= 1, got {per_tier}")
    problems, counts = [], {}
    for tier in task.clusters:
        enumerated = getattr(task, "problems", None)
        if enumerated is not None:  # a fixed dataset: shuffle its distinct problems
            candidates = _distinct(p for p in enumerated if p.cluster == tier)
            random.Random(f"{seed}:{tier}").shuffle(candidates)
            exact = True
        else:
            candidates = _probe(task, tier, seed)
            d = len(candidates)
            exact = d * math.exp(-PROBE / d) < 0.01
        n = min(per_tier, int(MAX_HELDOUT_FRAC * len(candidates))) if exact else per_tier
        problems += candidates[:n]
        counts[tier] = TierCount(len(candidates), exact, n, capped=n < per_tier)
    return HeldOut(problems, counts)


def sample_excluding(task, n: int, rng: random.Random, exclude: frozenset[str],
                     cluster: str | None = None, *, max_rounds: int = 50) -> list[Problem]:
    """`n` problems from `task` (optionally one tier) whose prompts are not in `exclude`."""
    out: list[Problem] = []
    for _ in range(max_rounds):
        out += [p for p in task.sample(max(n - len(out), 1), rng, cluster=cluster)
                if p.prompt not in exclude]
        if len(out) >= n:
            return out[:n]
    where = f"tier {cluster!r}" if cluster else f"task {task.name!r}"
    raise ValueError(f"could not draw {n} training problems from {where} outside the "
                     f"held-out set ({len(out)} after {max_rounds} rounds)")
