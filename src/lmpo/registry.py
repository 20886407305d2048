"""Name -> callable registries with errors that list the valid choices.

Both the loss library and the advantage estimators use one `Registry`, so the
trainer and the verl/TRL adapters look every method up the same way and never
special-case a name.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable
from typing import Any

from lmpo.domains import Domain, parse
from lmpo.errors import BadHyperParameter, OutOfDomain, UnknownName

# what a train config's part is when it names none (the config and the registries read it)
DEFAULT_LOSS = "ppo_clip"
DEFAULT_ESTIMATOR = "grpo"
DEFAULT_CONTROLLER = "none"  # stops nothing


def nearest(name: str, choices: list[str]) -> str:
    """A ' (did you mean X?)' hint for a misspelt name, or ''."""
    close = difflib.get_close_matches(name, choices, n=1)
    if not close:  # an abbreviation: learning_rate -> lr
        initials = "".join(w[:1] for w in name.split("_"))
        close = [c for c in choices if c == initials]
    return f" (did you mean {close[0]!r}?)" if close else ""


def plural(noun: str) -> str:
    """'loss' -> 'losses', 'advantage estimator' -> 'advantage estimators'."""
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


class Registry:
    """Maps a name to a factory whose keyword-only parameters are hyper-parameters.

    `get(name, **hparams)` binds the hyper-parameters and returns the callable;
    unknown names raise `KeyError` listing every registered name, unknown
    hyper-parameters raise `TypeError` listing the valid ones.
    """

    def __init__(self, kind: str, defaults: dict[str, Any] | None = None):
        self.kind = kind
        self.defaults = dict(defaults or {})  # metadata every entry has unless it says otherwise
        self._entries: dict[str, Callable[..., Any]] = {}
        self._meta: dict[str, dict[str, Any]] = {}
        self._hparams: dict[str, dict[str, Any]] = {}

    def register(self, name: str, **meta: Any) -> Callable[[Callable], Callable]:
        def deco(fn: Callable) -> Callable:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._entries[name] = fn
            self._meta[name] = meta
            return fn

        return deco

    def names(self) -> list[str]:
        return sorted(self._entries)

    def _lookup(self, name: str) -> Callable:
        if name not in self._entries:
            raise UnknownName(
                f"unknown {self.kind} {name!r}{nearest(str(name), self.names())}; "
                f"valid {plural(self.kind)}: {', '.join(self.names())}"
            )
        return self._entries[name]

    def hparams(self, name: str) -> dict[str, Any]:
        """The hyper-parameters of `name` with their defaults."""
        fn = self._lookup(name)
        if name not in self._hparams:  # inspected once: adapters call get() per micro-batch
            target = fn.__init__ if inspect.isclass(fn) else fn
            self._hparams[name] = {
                p.name: p.default
                for p in inspect.signature(target).parameters.values()
                if p.kind is inspect.Parameter.KEYWORD_ONLY
            }
        return dict(self._hparams[name])

    def meta(self, name: str) -> dict[str, Any]:
        """The entry's registration metadata over the registry's defaults."""
        self._lookup(name)
        return self.defaults | self._meta[name]

    def domains(self, name: str) -> dict[str, Domain]:
        """The declared domain of each hyper-parameter of `name` (registration metadata
        `domains`, specs parsed by `lmpo.domains.parse`)."""
        self._lookup(name)
        return {k: parse(v) for k, v in self._meta[name].get("domains", {}).items()}

    def check_hparams(self, name: str, hparams: dict[str, Any]) -> None:
        """Unknown hyper-parameters and values outside their declared domains fail, one line
        each naming the key."""
        valid = self.hparams(name)
        unknown = sorted(set(hparams) - set(valid))
        if unknown:
            shown = ", ".join(valid) if valid else "none"
            raise BadHyperParameter(
                f"{self.kind} {name!r} got unknown hyper-parameter(s) {unknown}; "
                f"valid ones: {shown}"
            )
        domains = self.domains(name)
        for key, value in hparams.items():
            if key in domains and not domains[key].contains(value):
                raise OutOfDomain(f"{self.kind} {name!r}: {key}={value!r} is outside its "
                                  f"domain {domains[key]}")
        broken = self.unmet_requirement(name, valid | hparams)
        if broken:
            raise OutOfDomain(f"{self.kind} {name!r}: {broken}")

    def unmet_requirement(self, name: str, values: dict[str, Any]) -> str | None:
        """The first joint rule that `values` break, in words: registration metadata
        `requires` ({key: {other: value}}: "when key is set, other must be value") and
        `ordered` ([(low, high)]: "low <= high" where both are set)."""
        for key, needs in self._meta[name].get("requires", {}).items():
            if values.get(key) is None:
                continue
            for other, want in needs.items():
                if values.get(other) != want:
                    return f"{key}={values[key]!r} needs {other}={want!r}"
        for low, high in self._meta[name].get("ordered", ()):
            a, b = values.get(low), values.get(high)
            if a is not None and b is not None and a > b:
                return f"{low}={a!r} needs {low} <= {high} ({b!r})"
        return None

    def get(self, name: str, **hparams: Any) -> Callable:
        """Bind `hparams` to the entry `name`. Classes are instantiated."""
        fn = self._lookup(name)
        self.check_hparams(name, hparams)
        if inspect.isclass(fn):
            return fn(**hparams)
        bound = functools.partial(fn, **hparams)
        functools.update_wrapper(bound, fn)
        bound.name = name  # type: ignore[attr-defined]
        return bound
