"""Hyper-parameter domains: declared with each registered part, checked when it is built.

A domain is written as a short spec and parsed once:

    "(0, 1]"  "[0, inf)"  "(1, inf) | None"  "(0, inf]"     real intervals (inf allowed only
                                                            where the bracket is closed)
    "int [1, inf)"                                          integers
    "{sign, abs}"                                           one of these strings
    "bool"                                                  True or False
    "real"                                                  any finite number
    "path | None"                                           a file or folder name

NaN is in no domain. A registration without a domain for one of its hyper-parameters
fails a test, so every method added later carries them.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field

_INTERVAL = re.compile(r"^(int\s+)?([\[(])\s*([^,]+?)\s*,\s*([^\])]+?)\s*([\])])$")


@dataclass(frozen=True)
class Domain:
    spec: str
    kind: str  # real | int | choice | bool | path
    optional: bool = False  # None is allowed
    low: float = -math.inf
    high: float = math.inf
    low_closed: bool = False
    high_closed: bool = False
    choices: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.spec

    def contains(self, value) -> bool:
        if value is None:
            return self.optional
        if self.kind == "bool":
            return isinstance(value, bool)
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind == "path":
            return isinstance(value, str) and bool(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.kind == "int" and not (isinstance(value, int) or float(value).is_integer()):
            return False
        if math.isnan(value):
            return False
        above = value > self.low or (self.low_closed and value == self.low)
        below = value < self.high or (self.high_closed and value == self.high)
        return above and below


def _bound(text: str) -> float:
    text = text.strip()
    if text in ("inf", "+inf"):
        return math.inf
    if text == "-inf":
        return -math.inf
    return float(text)


@functools.cache
def parse(spec: str) -> Domain:
    """The Domain a spec names (see the module docstring); ValueError for a bad spec."""
    core, optional = spec.strip(), False
    if core.endswith("| None"):
        core, optional = core[: -len("| None")].strip(), True
    if core in ("bool", "path"):
        return Domain(spec, core, optional)
    if core == "real":
        return Domain(spec, "real", optional)
    if core.startswith("{") and core.endswith("}"):
        choices = tuple(c.strip() for c in core[1:-1].split(",") if c.strip())
        return Domain(spec, "choice", optional, choices=choices)
    m = _INTERVAL.match(core)
    if not m:
        raise ValueError(f"not a domain spec: {spec!r}")
    is_int, lo_b, lo, hi, hi_b = m.groups()
    return Domain(spec, "int" if is_int else "real", optional, _bound(lo), _bound(hi),
                  lo_b == "[", hi_b == "]")


def dom(default, domain: str):
    """A field with its domain (`lmpo.domains` syntax), checked by validation
    (`lmpo.trainer.validate.check_domains`) with one line naming the key."""
    return field(default=default, metadata={"domain": domain})
