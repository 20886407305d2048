"""Rollout controllers: what may end a sequence during decoding (ESPO and its ablations).

The sampler calls `begin_batch`, `step` at every decoding step and `end_batch`;
the trainer calls `observe` with each step's metrics row after the update and
logs `metrics()`. A stopped sequence is an absorbing failure with reward
`r_fail`. The trainer only ever talks to this protocol; `build_controller`
turns the config's `espo` section into one.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Protocol

import torch

from lmpo.registry import Registry

CONTROLLERS = Registry("rollout controller")


class RolloutController(Protocol):
    needs_values: bool  # the sampler must pass V(s_t) to `step`
    r_fail: float  # reward of a stopped sequence

    def begin_batch(self, batch_size: int) -> None: ...

    def step(self, rows: torch.Tensor, regret: torch.Tensor, values: torch.Tensor | None,
             t: int) -> torch.Tensor:
        """Stop decisions `[len(rows)]` bool for the active rows at decoding step t."""

    def end_batch(self, regret: torch.Tensor, lengths: torch.Tensor) -> None: ...

    def observe(self, row: dict, step: int) -> None:
        """After the update: the step's metrics row (value loss, tokens, ...)."""

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


class StopAccounting:
    """What every stopping controller shares: the batch's stopped rows, the stop rate and
    the token savings.

    Savings are measured, not guessed: the trainer finishes a copy of every stopped
    sequence (`espo.measure_false_positives`) and reports the tokens it would still
    have generated (`espo/would_be_extra_tokens`); savings = extra / (generated + extra),
    cumulative over the run.
    """

    _ACCOUNTING = ("last_stop_rate", "tokens_cum", "extra_cum")

    def __init__(self, *, r_fail: float, min_tokens: int):
        if min_tokens < 1:
            raise ValueError(f"min_tokens must be >= 1, got {min_tokens}")
        self.r_fail, self.min_tokens = r_fail, min_tokens
        self.last_stop_rate, self.tokens_cum, self.extra_cum = 0.0, 0.0, 0.0
        self._stopped = torch.zeros(0, dtype=torch.bool)

    def begin_batch(self, batch_size: int) -> None:
        self._stopped = torch.zeros(batch_size, dtype=torch.bool)

    def end_batch(self, regret: torch.Tensor, lengths: torch.Tensor) -> None:
        self.last_stop_rate = float(self._stopped.double().mean()) if len(self._stopped) else 0.0

    def observe(self, row: dict, step: int) -> None:
        self.tokens_cum += float(row.get("tokens/generated", 0.0))
        self.extra_cum += float(row.get("espo/would_be_extra_tokens", 0.0))

    @property
    def savings(self) -> float:
        total = self.tokens_cum + self.extra_cum
        return self.extra_cum / total if total else 0.0

    def metrics(self) -> dict[str, float]:
        return {"espo/stop_rate": self.last_stop_rate, "espo/savings_cum": self.savings}

    def _state(self, names) -> dict:
        return {k: getattr(self, k) for k in (*self._ACCOUNTING, *names)}

    def _load(self, state: dict, names) -> None:
        for k in (*self._ACCOUNTING, *names):
            setattr(self, k, state[k])


def reference_tokens(path: str | Path) -> list[float]:
    """Cumulative generated tokens per step (`tokens/cumulative`) of a reference run:
    its run directory or its metrics.jsonl."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.jsonl"
    if not path.exists():
        raise ValueError(f"reference run {path} does not exist")
    curve = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        try:
            row = json.loads(line)
            curve.append(float(row["tokens/cumulative"]))
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{path}:{lineno}: not a metrics row with tokens/cumulative") \
                from None
    if not curve:
        raise ValueError(f"reference run {path} has no metrics rows")
    return curve


@CONTROLLERS.register("random_stop", diagnostics=("espo/stop_rate", "espo/savings_cum",
                                                 "espo/false_positive_rate",
                                                 "espo/stop_position_mean"))
class RandomStop(StopAccounting):
    """ESPO's variant F: stop positions drawn at random, at the same token savings.

    Every active row stops at each step with probability `hazard` (positions are
    memoryless, independent of the sequence). After each step the hazard moves so
    that the cumulative generated tokens track a target: `(1 - savings) x` the
    tokens this run would have generated unstopped (measured by finishing the
    stopped copies), or the `tokens/cumulative` curve of a `reference` ESPO run
    (extended at its last per-step rate if this run is longer).
    """

    needs_values = False

    def __init__(self, *, savings: float | None = None, reference: str | None = None,
                 hazard: float = 0.02, gain: float = 2.0, r_fail: float = -1.0,
                 min_tokens: int = 1, seed: int = 0):
        super().__init__(r_fail=r_fail, min_tokens=min_tokens)
        if (savings is None) == (reference is None):
            raise ValueError("random stopping needs exactly one target: savings (a fraction) "
                             "or reference (an ESPO run whose token curve it tracks)")
        if savings is not None and not 0 < savings < 1:
            raise ValueError(f"savings must be in (0, 1), got {savings}")
        if not 0 < hazard < 1:
            raise ValueError(f"hazard must be in (0, 1), got {hazard}")
        self.savings_target, self.reference = savings, reference
        self.curve = reference_tokens(reference) if reference is not None else None
        self.hazard, self.gain = hazard, gain
        self.gen = torch.Generator().manual_seed(seed)

    def step(self, rows, regret, values, t):
        if t + 1 < self.min_tokens:
            return torch.zeros(len(rows), dtype=torch.bool)
        stop = torch.rand(len(rows), generator=self.gen) < self.hazard
        self._stopped[rows] |= stop
        return stop

    def target_tokens(self, step: int) -> float:
        """Cumulative tokens this run should have generated after `step`."""
        if self.curve is None:
            return (1 - self.savings_target) * (self.tokens_cum + self.extra_cum)
        if step <= len(self.curve):
            return self.curve[step - 1]
        rate = self.curve[-1] / len(self.curve)
        return self.curve[-1] + rate * (step - len(self.curve))

    def observe(self, row: dict, step: int) -> None:
        super().observe(row, step)
        target = self.target_tokens(step)
        if target > 0:
            error = (self.tokens_cum - target) / target  # > 0: too many tokens, stop more
            self.hazard = min(max(self.hazard * math.exp(self.gain * error), 1e-4), 0.5)

    def metrics(self) -> dict[str, float]:
        return super().metrics() | {"espo/hazard": self.hazard}

    _STATE = ("hazard",)

    def state_dict(self) -> dict:
        return self._state(self._STATE) | {"gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self._load(state, self._STATE)
        self.gen.set_state(state["gen"])


def build_controller(section: dict, *, total_steps: int, seed: int) -> RolloutController | None:
    """The controller the config's `espo` section asks for (None when it is disabled).

    mode "random" is variant F (`random_stop`); every other mode is ESPO's own.
    """
    if not section.get("enabled"):
        return None
    name = "random_stop" if section.get("mode") == "random" else "espo"
    accepted = CONTROLLERS.hparams(name)
    given = {k: v for k, v in section.items() if k in accepted}
    if "total_steps" in accepted:
        given["total_steps"] = total_steps
    return CONTROLLERS.get(name, **given | {"seed": seed})
