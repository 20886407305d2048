"""Independent float64 references for the rollout corrections, one file per family.

Written token by token with `math` from each source's definition (verl 0.9.1's
rollout_corr_helper, TRL's vLLM importance-sampling modes, OpenRLHF's seq-mask-tis,
SkyRL's outlier-token mask, AReaL's M2PO), sharing no code with `lmpo.rollout`. A
reference takes the log-ratios and the response mask as lists of rows and the
correction's hyper-parameters with their defaults filled in, and returns (the per-token
weights, 0 on padding, or None for a mask-only correction; the mask). `@reference(kind,
cases=[...])` registers it with the hyper-parameter sets the tests run it at. Every module
in this folder is imported here: a new correction's reference is one new file
(tests/test_corrections.py runs them all, and fails on a correction without one).
"""

from __future__ import annotations

import importlib
import math
import pkgutil

from tests.reference_registry import registry

S = 20.0  # the safety clamp on log-ratios before exp
REFERENCES, reference = registry("correction")


def ex(v: float) -> float:
    return math.exp(min(max(v, -S), S))


def seq_sum(lr: list[float], m: list[float]) -> float:
    return sum(x for x, k in zip(lr, m, strict=True) if k)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
