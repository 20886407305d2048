"""Coefficient schedules: the KL and entropy coefficients that change with what the run
observes (`kl.schedule`, `optim.entropy_schedule`: `{name, hparams}`). They are stateful
parts of the run (checkpointed in `RunState.schedules`, so a resumed run continues the
coefficient where it was), registered by name in `SCHEDULES` ("coefficient schedule";
not to be confused with lmpo's rollout controllers).

- `fixed` (either): the configured coefficient throughout.
- `adaptive_kl` (`kl.schedule`; verl's `AdaptiveKLController`, `algorithm.kl_ctrl.type:
  adaptive`; OpenRLHF's `--algo.kl.target`/`--algo.kl.horizon`; Ziegler et al. 2019):
  beta <- beta (1 + clip(KL / target_kl - 1, -0.2, 0.2) n / horizon), KL the batch's mean
  per-response KL to the reference, n its responses.
- `adaptive_entropy` (`optim.entropy_schedule`; TRL's `use_adaptive_entropy`,
  Skywork-OR1): after each optimiser step c <- min(c + delta, coef_max) if the step's
  token-mean entropy H <= target, else max(c - delta, coef_min); the bonus acts only
  while the last H <= target.

The starting value is the configured coefficient (`kl.coef`, `optim.entropy_coef`).
`adaptive_kl` updates once per step, after the update, as verl's `apply_kl_penalty` does
with the batch it has just penalised; `adaptive_entropy` after every applied optimiser
step (a skipped, non-finite one leaves it), measured on the tokens of that minibatch.
"""

from __future__ import annotations

import math

import torch

from lmpo.losses.kl import kl_penalty
from lmpo.registry import Registry

SCHEDULES = Registry("coefficient schedule", defaults={"title": "", "source": "",
                                                      "summary": "", "applies": "both"})


@SCHEDULES.register("fixed", title="fixed coefficient", summary="the configured coefficient")
class Fixed:
    adaptive = False

    def __init__(self):
        self.value = 0.0

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


@SCHEDULES.register("adaptive_kl", applies="kl", title="adaptive KL coefficient",
                    source="verl AdaptiveKLController (algorithm.kl_ctrl.type: adaptive, "
                           "target_kl, horizon); OpenRLHF --algo.kl.target / --algo.kl.horizon",
                    summary="beta *= 1 + clip(KL / target_kl - 1, +-0.2) n / horizon after "
                            "each step",
                    domains={"target_kl": "(0, inf)", "horizon": "(0, inf)"})
class AdaptiveKL:
    adaptive = True

    def __init__(self, *, target_kl: float = 0.1, horizon: float = 10000.0):
        self.target_kl, self.horizon = target_kl, horizon
        self.value = 0.0

    def update(self, current_kl: float, n_steps: int) -> None:
        error = min(max(current_kl / self.target_kl - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


@SCHEDULES.register("adaptive_entropy", applies="entropy", title="adaptive entropy bonus",
                    source="TRL use_adaptive_entropy (Skywork-OR1: entropy_target, "
                           "entropy_coef_delta, entropy_coef_min / _max)",
                    summary="c +- delta after each optimiser step towards the target "
                            "entropy; the bonus acts only while H <= target",
                    domains={"target": "[0, inf)", "delta": "[0, inf)",
                             "coef_min": "[0, inf)", "coef_max": "[0, inf)"},
                    ordered=[("coef_min", "coef_max")])
class AdaptiveEntropy:
    adaptive = True

    def __init__(self, *, target: float = 0.2, delta: float = 0.005, coef_min: float = 0.0,
                 coef_max: float = 1.0):
        self.target, self.delta, self.coef_min, self.coef_max = target, delta, coef_min, coef_max
        self.value, self.last = 0.0, math.inf  # TRL starts with no entropy seen: no bonus

    def applied(self) -> float:
        return self.value if self.last <= self.target else 0.0

    def update(self, entropy: float) -> None:
        if entropy <= self.target:
            self.value = min(self.value + self.delta, self.coef_max)
        else:
            self.value = max(self.value - self.delta, self.coef_min)
        self.last = entropy

    def state_dict(self) -> dict:
        return {"value": self.value, "last": self.last}

    def load_state_dict(self, state: dict) -> None:
        self.value, self.last = state["value"], state["last"]


def schedule_settings(section) -> dict:
    """A `{name, hparams}` config section's hyper-parameters over its schedule's defaults."""
    return SCHEDULES.hparams(section.name) | section.hparams


def list_schedules(applies: str | None = None) -> list[str]:
    return [n for n in SCHEDULES.names()
            if applies is None or SCHEDULES.meta(n)["applies"] in ("both", applies)]


def mean_response_kl(old_logp, ref_logp, mask, kind: str) -> float:
    """verl's `current_kl`: the KL estimate `kind` per token, its masked mean per response
    (count + 1e-8, as verl's masked_mean), averaged over the responses."""
    kld = kl_penalty(old_logp, ref_logp, kind) * mask
    return float(((kld * mask).sum(-1) / (mask.sum(-1) + 1e-8)).mean())


class Schedules:
    """The run's adaptive coefficients (RunState.schedules; None when every one is fixed)."""

    def __init__(self, kl, entropy):
        self.kl, self.entropy = kl, entropy
        self._window = [0.0, 0.0]  # this minibatch's entropy sum and token count

    # --------------------------------------------------------------- what the update uses
    def kl_coef(self) -> float | None:
        return self.kl.value if self.kl.adaptive else None

    def entropy_coef(self) -> float | None:
        return self.entropy.applied() if self.entropy.adaptive else None

    # --------------------------------------------------------------- what it observes
    def observe_entropy(self, ent: torch.Tensor, mask: torch.Tensor) -> None:
        if self.entropy.adaptive:
            self._window[0] += float((ent.detach() * mask).sum())
            self._window[1] += float(mask.sum())

    def end_minibatch(self, applied: bool) -> None:
        """After an optimiser step (`applied`: not skipped): the entropy schedule moves."""
        if self.entropy.adaptive and applied:
            self.entropy.update(self._window[0] / max(self._window[1], 1.0))
        self._window = [0.0, 0.0]

    def end_step(self, batch, cfg) -> dict:
        """After the step's update: the KL schedule moves on the batch it penalised; the
        coefficients for the row."""
        row = {}
        if self.kl.adaptive:
            keep = batch.keep
            used = self.kl.value
            if len(keep):
                kind = "k1" if cfg.kl.mode == "reward" else cfg.kl.kind
                current = mean_response_kl(batch.old_logp[keep], batch.ref_logp[keep],
                                           batch.resp_mask[keep], kind)
                self.kl.update(current, len(keep))
                row["schedule/kl_observed"] = current
            row["schedule/kl_coef"] = used
        if self.entropy.adaptive:
            row["schedule/entropy_coef"] = self.entropy.value
            if math.isfinite(self.entropy.last):
                row["schedule/entropy_observed"] = self.entropy.last
        return row

    def state_dict(self) -> dict:
        return {"kl": self.kl.state_dict(), "entropy": self.entropy.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.kl.load_state_dict(state["kl"])
        self.entropy.load_state_dict(state["entropy"])


def build_schedules(cfg) -> Schedules | None:
    """The run's schedules, started at the configured coefficients; None when both are
    fixed (a run without one checkpoints as before)."""
    kl = SCHEDULES.get(cfg.kl.schedule.name, **cfg.kl.schedule.hparams)
    entropy = SCHEDULES.get(cfg.optim.entropy_schedule.name,
                            **cfg.optim.entropy_schedule.hparams)
    if not (kl.adaptive or entropy.adaptive):
        return None
    kl.value, entropy.value = cfg.kl.coef, cfg.optim.entropy_coef
    return Schedules(kl, entropy)
