"""ESPO's variant F: random stopping at the same token savings (the paper's ablation)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from lmpo.rollout.controllers.base import StopAccounting
from lmpo.rollout.controllers.registry import CONTROLLERS

OWN_RUN = "@run"  # as a comparator on the reference arm's own run: that run's curve
STOP_DIAGNOSTICS = ("espo/stop_rate", "espo/savings_cum", "espo/false_positive_rate",
                    "espo/stop_position_mean")


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


@CONTROLLERS.register("random_stop", diagnostics=STOP_DIAGNOSTICS,
                      domains={"savings": "(0, 1) | None", "reference": "path | None",
                               "hazard": "(0, 1)", "gain": "(0, inf)", "r_fail": "real | None",
                               "stop_value": "{absorbing, bootstrap}",
                               "min_tokens": "int [1, inf)", "measure_false_positives": "bool"},
                      example={"savings": 0.2}, engagement="espo/stop_rate",
                      requires={"savings": {"measure_false_positives": True}},
                      title="ESPO variant F", source="arXiv 2605.29860",
                      summary="random stopping at the same token savings as an ESPO run "
                              "(ESPO's ablation)")
class RandomStop(StopAccounting):
    """ESPO's variant F: stop positions drawn at random, at the same token savings.

    Every active row stops at each step with probability `hazard` (positions are
    memoryless, independent of the sequence). After each step the hazard moves so
    that the cumulative generated tokens track a target: `(1 - savings) x` the
    tokens this run would have generated unstopped (measured by finishing the
    stopped copies), or the `tokens/cumulative` curve of a `reference` ESPO run
    (extended at its last per-step rate if this run is longer); `reference: "@run"`,
    as a same-batch comparator on the reference arm's own run, tracks that run's curve
    as it is made (its `tokens/cumulative` at each step).
    """

    needs_values = False

    def __init__(self, *, savings: float | None = None, reference: str | None = None,
                 hazard: float = 0.02, gain: float = 2.0, r_fail: float | None = None,
                 min_tokens: int = 1, measure_false_positives: bool = True, seed: int = 0,
                 failure_reward: float | None = 0.0, reward_range: tuple = (0.0, 1.0),
                 stop_value: str = "absorbing"):
        super().__init__(**self.shared(locals()))
        if (savings is None) == (reference is None):
            raise ValueError("random stopping needs exactly one target: savings (a fraction) "
                             "or reference (an ESPO run whose token curve it tracks)")
        if savings is not None and not 0 < savings < 1:
            raise ValueError(f"savings must be in (0, 1), got {savings}")
        if savings is not None and not measure_false_positives:
            raise ValueError("random stopping at a savings fraction measures the savings by "
                             "finishing stopped copies: set measure_false_positives=true")
        if not 0 < hazard < 1:
            raise ValueError(f"hazard must be in (0, 1), got {hazard}")
        self.savings_target, self.reference = savings, reference
        # "@ARM": an experiment's arm, which `lmpo compare` points at its run of the same
        # seed (lmpo.experiments.run.sweep); read once it is a run directory
        self.curve = reference_tokens(reference) if reference is not None and \
            not reference.startswith("@") else None
        self.hazard, self.gain = hazard, gain
        self.reference_gap = 0.0
        self.gen = torch.Generator().manual_seed(seed)

    def step(self, rows, regret, values, t):
        if t + 1 < self.min_tokens:
            return torch.zeros(len(rows), dtype=torch.bool)
        stop = torch.rand(len(rows), generator=self.gen) < self.hazard
        self._stopped[rows] |= stop
        return stop

    def target_tokens(self, step: int) -> float:
        """Cumulative tokens this run should have generated after `step`."""
        if self.savings_target is not None:
            return (1 - self.savings_target) * (self.tokens_cum + self.extra_cum)
        if self.curve is None:
            raise ValueError(f"reference {self.reference!r} names an experiment's arm: "
                             "`lmpo compare` points it at that arm's run of the same seed; "
                             "`lmpo train` needs the reference run's directory")
        if step <= len(self.curve):
            return self.curve[step - 1]
        rate = self.curve[-1] / len(self.curve)
        return self.curve[-1] + rate * (step - len(self.curve))

    def observe(self, row: dict, step: int) -> None:
        super().observe(row, step)
        target = float(row["tokens/cumulative"]) if self.reference == OWN_RUN \
            else self.target_tokens(step)  # OWN_RUN: the run it rides on, at this step
        if self.reference is not None and target > 0:  # how far off the reference's curve
            self.reference_gap = abs(self.tokens_cum - target) / target
        if target > 0:
            error = (self.tokens_cum - target) / target  # > 0: too many tokens, stop more
            step = min(self.gain * error, 50.0)  # a far-off target moves it fast, not to inf
            self.hazard = min(max(self.hazard * math.exp(step), 1e-4), 0.5)

    def metrics(self) -> dict[str, float]:
        """`espo/hazard`; with a `reference`, `espo/reference_gap`: |cumulative tokens -
        the reference's at this step| / the reference's, so a claim can hold the curves
        within a declared gap at every step (reduce: max), not only at the end."""
        gap = {"espo/reference_gap": self.reference_gap} if self.reference is not None else {}
        return super().metrics() | {"espo/hazard": self.hazard} | gap

    _STATE = ("hazard",)  # the reference gap is recomputed by the next observe

    def state_dict(self) -> dict:
        return self._state(self._STATE) | {"gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self._load(state, self._STATE)
        self.gen.set_state(state["gen"])
