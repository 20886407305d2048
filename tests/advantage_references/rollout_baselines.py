"""ReMax (score minus the greedy response's score) and GDPO (each reward function
normalised within its group, weighted sum, whitened over the batch: TRL's
multi_objective_aggregation="normalize_then_sum")."""

from __future__ import annotations

import math
import statistics

from tests.advantage_references import reference


@reference("remax")
def remax(scores, groups, *, baselines):
    return [s - b for s, b in zip(scores, baselines, strict=True)]


@reference("gdpo", cases=[{}, {"eps": 0.5}])
def gdpo(scores, groups, *, parts, weights, eps=1e-4):
    totals = []
    for i, g in enumerate(groups):
        total = 0.0
        for k, w in enumerate(weights):
            if math.isnan(parts[i][k]):
                continue
            xs = [parts[j][k] for j, h in enumerate(groups)
                  if h == g and not math.isnan(parts[j][k])]
            if len(xs) < 2:  # TRL's nanstd is NaN there: the function adds nothing
                continue
            total += w * (parts[i][k] - statistics.fmean(xs)) / (statistics.stdev(xs) + eps)
        totals.append(total)
    mean = statistics.fmean(totals)
    sd = statistics.stdev(totals) if len(totals) > 1 else 0.0
    return [(t - mean) / (sd + eps) for t in totals]
