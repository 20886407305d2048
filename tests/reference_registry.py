"""What the float64 reference folders share (tests/advantage_references/,
tests/correction_references/): a reference function with the hyper-parameter sets the
tests run it at, registered under the part's name by a decorator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Reference:
    fn: Callable
    cases: list[dict] = field(default_factory=lambda: [{}])


def registry(what: str) -> tuple[dict[str, Reference], Callable]:
    """(the references by name, the decorator `@reference(name, cases=[...])` that adds one;
    a second reference for one `what` is an error)."""
    references: dict[str, Reference] = {}

    def reference(name: str, *, cases: list[dict] | None = None):
        def deco(fn):
            if name in references:
                raise ValueError(f"two references for {what} {name!r}")
            references[name] = Reference(fn, list(cases) if cases else [{}])
            return fn

        return deco

    return references, reference
