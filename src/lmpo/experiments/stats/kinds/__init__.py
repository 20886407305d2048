"""Claim kinds, as a registry: one module per kind declares its schema, its statistic,
its test (p, interval, MDE), how its label reads and its units (`base.ClaimKind`).

    kind = claim_kind(claim["kind"])
    point, lo, hi, method = kind.interval(claim, a, b)

A new kind is one module here (docs/your-method.md, "A new claim kind"); no other module
names a kind (tests/test_claim_kinds.py checks).
"""

import importlib
import pkgutil

from lmpo.experiments.stats.kinds.base import CLAIM_KINDS, ClaimKind, claim_kind, claim_p

for _module in pkgutil.iter_modules(__path__):  # every kind's module registers itself
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["CLAIM_KINDS", "ClaimKind", "claim_kind", "claim_p"]
