"""Prompt samplers over a finite problem pool: shuffled, clustered, easy-to-hard.

Deterministic by seed, and resumable: `state_dict()` holds the position and the
RNG state, so a resumed run draws exactly the batches the uninterrupted run would.
"""

from __future__ import annotations

import random

from lmpo.choices import SAMPLER_KINDS as KINDS
from lmpo.registry import nearest
from lmpo.tasks.base import Problem


class Sampler:
    """Yields batches of `batch_size` problems, epoch after epoch.

    shuffled:      the whole pool shuffled each epoch.
    clustered:     each batch from a single cluster; clusters visited in a random order
                   each epoch (EBPO's "clustered sampling").
    easy_to_hard:  each batch from a single cluster, clusters in `order` (easy first).
    """

    def __init__(self, problems: list[Problem], batch_size: int, *, kind: str = "shuffled",
                 seed: int = 0, order: list[str] | None = None):
        if kind not in KINDS:
            raise ValueError(f"unknown sampler {kind!r}{nearest(kind, list(KINDS))}; "
                             f"valid samplers: {', '.join(KINDS)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.problems, self.batch_size, self.kind = list(problems), batch_size, kind
        present = list(dict.fromkeys(p.cluster for p in self.problems))
        self.order = [c for c in (order or present) if c in present]
        self.rng = random.Random(seed)
        self.epoch, self.position, self._plan = 0, 0, self._make_plan()

    def _make_plan(self) -> list[list[int]]:
        idx = list(range(len(self.problems)))
        self.rng.shuffle(idx)
        if self.kind == "shuffled":
            return [idx[i:i + self.batch_size] for i in range(0, len(idx), self.batch_size)]
        clusters = list(self.order)
        if self.kind == "clustered":
            self.rng.shuffle(clusters)
        plan = []
        for c in clusters:
            members = [i for i in idx if self.problems[i].cluster == c]
            plan += [members[i:i + self.batch_size]
                     for i in range(0, len(members), self.batch_size)]
        return plan

    def next_batch(self) -> list[Problem]:
        if self.position >= len(self._plan):
            self.epoch, self.position, self._plan = self.epoch + 1, 0, self._make_plan()
        batch = self._plan[self.position]
        self.position += 1
        return [self.problems[i] for i in batch]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "plan": self._plan,
                "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = state["epoch"], state["position"]
        self._plan = [list(b) for b in state["plan"]]
        rng = state["rng"]
        self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
