"""Running moments of everything seen: EBPO's global statistics and a reward model's
running score normalisation share this accumulator."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Welford:
    """Running (weighted) count, mean and sum of squared deviations; var = m2 / n.

    Batches merge with Chan et al.'s parallel update, which equals adding the
    values one at a time (Welford) up to rounding. `decay(f)` scales the weight
    of everything seen by f (the mean is unchanged).
    """

    n: float = 0.0
    mean: float = 0.0
    m2: float = 0.0

    def update(self, values: torch.Tensor) -> None:
        x = values.detach().to(torch.float64).flatten()
        k = x.numel()
        if k == 0:
            return
        b_mean = float(x.mean())
        b_m2 = float(((x - b_mean) ** 2).sum())
        total = self.n + k
        d = b_mean - self.mean
        self.mean += d * k / total
        self.m2 += b_m2 + d * d * self.n * k / total
        self.n = total

    def decay(self, factor: float) -> None:
        self.n *= factor
        self.m2 *= factor

    @property
    def var(self) -> float:
        return self.m2 / self.n if self.n else 0.0
