"""Independent float64 references for the critic-free advantage estimators, one file per
method.

Written sample by sample in plain Python from each estimator's formula, sharing no code
with `lmpo.advantages`. A reference takes the scores and group ids as lists (and
`lengths`, for an estimator registered with `wants_lengths`) and returns one advantage per
sample; `@reference(name, cases=[...])` registers it with the hyper-parameter sets the
tests run it at (default: the estimator's defaults only). Every module in this folder is
imported here: a new estimator's reference is one new file
(tests/test_advantage_references.py runs them all).
"""

from __future__ import annotations

import importlib
import pkgutil

from tests.reference_registry import registry

REFERENCES, reference = registry("estimator")


def members(scores: list[float], groups: list[int], g: int) -> list[float]:
    """The scores of group `g`."""
    return [s for s, h in zip(scores, groups, strict=True) if h == g]


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
