"""Common random numbers per row: each sampled row draws its uniforms from a stream of its
own, seeded by what the row *is* (a held-out problem and the index of its sample), not by
where it sits in a batch.

The sampler draws one token per row by inverse CDF (`lmpo.rollout.sampler.draw`): one
uniform against the row's cumulative probabilities. With one shared generator the
uniform a row gets depends on the batch's order, size and on which rows have finished
(finished rows leave the batch), so two policies sample one problem with unrelated
numbers. With `RowStreams`, step t of a row always uses the t-th uniform of its own
stream: two identical policies sample every problem identically whatever the order and
the batch size, and two policies that agree on a prefix draw the same tokens along it, so
the paired difference of two arms keeps only the noise where the policies differ (common
random numbers, the classic variance reduction for comparing two systems).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import torch


def problem_id(prompt: str, answer: str, cluster: str) -> str:
    """A problem's identity: 16 hex digits of a SHA-256 over its prompt, answer and tier."""
    return hashlib.sha256(f"{prompt}\0{answer}\0{cluster}".encode()).hexdigest()[:16]


def row_seed(base: int, ident: str, index: int) -> int:
    """The seed of sample `index` of the problem `ident`, under the stream seed `base`."""
    digest = hashlib.sha256(f"{base}\0{ident}\0{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


class RowStreams:
    """One uniform stream per row (`seeds[i]` seeds row i's); pass it to `sample` as its
    `generator`."""

    def __init__(self, seeds: Sequence[int]):
        self.seeds = list(seeds)
        self._table: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.seeds)

    def part(self, start: int, stop: int) -> RowStreams:
        """The streams of rows start..stop-1 (a batch of a longer list)."""
        return RowStreams(self.seeds[start:stop])

    def prepare(self, width: int) -> None:
        """Draw `width` uniforms per row (float64, each row from its own generator)."""
        table = torch.empty((len(self.seeds), width), dtype=torch.float64)
        generator = torch.Generator()
        for i, seed in enumerate(self.seeds):
            generator.manual_seed(seed)
            table[i] = torch.rand(width, generator=generator, dtype=torch.float64)
        self._table = table

    def at(self, rows: torch.Tensor, t: int) -> torch.Tensor:
        """[len(rows), 1] uniforms of step `t` for the original rows `rows`."""
        if self._table is None or t >= self._table.shape[1]:
            raise RuntimeError("RowStreams.prepare(width) must cover every step drawn")
        return self._table[rows.cpu(), t:t + 1]
