"""GRPO (group, batch or no std scaling), Dr. GRPO and RLOO; a group of one gets 0."""

from __future__ import annotations

import statistics

from tests.advantage_references import members, reference


@reference("grpo", cases=[{}, {"scale": "batch"}, {"scale": "none"}, {"eps": 0.0}])
def grpo(scores, groups, *, scale="group", eps=1e-6):
    batch_sd = statistics.stdev(scores) if len(scores) > 1 else 0.0
    out = []
    for s, g in zip(scores, groups, strict=True):
        xs = members(scores, groups, g)
        if len(xs) == 1:
            out.append(0.0)
            continue
        centred = s - sum(xs) / len(xs)
        sd = {"group": statistics.stdev(xs), "batch": batch_sd, "none": None}[scale]
        out.append(centred if sd is None else
                   0.0 if sd + eps == 0 else centred / (sd + eps))
    return out


@reference("dr_grpo")
def dr_grpo(scores, groups):
    return grpo(scores, groups, scale="none")


@reference("rloo")
def rloo(scores, groups):
    out = []
    for s, g in zip(scores, groups, strict=True):
        xs = members(scores, groups, g)
        out.append(0.0 if len(xs) == 1 else s - (sum(xs) - s) / (len(xs) - 1))
    return out
