"""Independent float64 references for every registered loss, one file per method.

Written element by element with the `math` module from each method's formula, sharing no
code with `lmpo.losses`. Each reference gives the per-token loss and its closed-form
derivative with respect to logp (for valid tokens), registered with `@reference(name,
cases=[...])`: the hyper-parameter sets the tests run it at (default: the loss's
defaults only). A `rows=True` reference takes whole rows (a sequence-level loss). Every
module in this folder is imported here: a new loss's reference is one new file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Reference:
    fn: Callable
    rows: bool = False
    cases: list[dict] = field(default_factory=lambda: [{}])


REFERENCES: dict[str, Reference] = {}


def reference(name: str, *, cases: list[dict] | None = None, rows: bool = False):
    def deco(fn):
        if name in REFERENCES:
            raise ValueError(f"two references for loss {name!r}")
        REFERENCES[name] = Reference(fn, rows, list(cases) if cases else [{}])
        return fn

    return deco


def ratio(lp: float, olp: float) -> float:
    """exp(clamp(lp - olp, -20, 20)), as every ratio loss clamps."""
    import math

    return math.exp(max(-20.0, min(20.0, lp - olp)))


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
