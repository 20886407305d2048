"""ESPO: early stopping of failing rollouts (arXiv 2605.29860).

At each decoding step, from quantities the sampler already has:

    g_t  = max_a log pi(a|s_t) - log pi(a_t|s_t)                  (regret)
    g~_t = (g_t - mu_g) / sqrt(sigma_g^2 + 1e-8)     (clipped to [-c, c] only if `clip` c)
    z_t  = alpha_s z_{t-1} + (1 - alpha_s) g~_t,  z_0 = 0
    stop if warmed_up and z_t > beta * max(V(s_t), eps_v)

mu_g, sigma_g^2 are EMAs of the batch mean / variance of g, updated only in
`end_batch` (frozen during a rollout, so no row's future leaks into a decision).
beta is a fixed, hand-set threshold as in the paper; the regret is not clipped (as in the
seed; `clip` is an option) and a stopped response scores `r_fail`, by default a failure's
reward (a stop counts as a failure; lower values warn: an extra penalty), or, with
`stop_value: bootstrap` (the no-r_fail ablation), nothing: its return is bootstrapped from
the critic's V(s_t) at the stop; `adapt_beta=True` (an lmpo
extension, off by default) moves it toward a target stop rate after every batch.
Ablations (`mode`): "regret_only" (V replaced by 1), "value_only" (z replaced by
1); random stopping at the same token savings (variant F) is
`lmpo.rollout.controllers.random_stop.RandomStop`.

Critic warm-up (relative, so it means the same at any reward scale): stopping
stays off until the value loss has fallen to `warmup_loss_frac` of its level
over the first `warmup_baseline_steps` steps (default: the first step, the
untrained critic) *and* changed by at most `warmup_rel_change` (relative) from
one step to the next, for `warmup_patience` consecutive steps; it is forced on
after `warmup_force_frac` of the run.
"""

from __future__ import annotations

import math

import torch

from lmpo.rollout.controllers.base import StopAccounting
from lmpo.rollout.controllers.random_stop import STOP_DIAGNOSTICS
from lmpo.rollout.controllers.registry import CONTROLLERS

MODES = ("full", "regret_only", "value_only")


DOMAINS = {
    "mode": "{full, regret_only, value_only}", "beta": "(0, inf]", "adapt_beta": "bool",
    "target_rate": "(0, 1)", "beta_lr": "[0, inf)", "beta_min": "(0, inf)",
    "beta_max": "(0, inf]", "alpha_s": "[0, 1)", "eps_v": "(0, inf)", "clip": "(0, inf] | None",
    "ema_decay": "[0, 1)", "r_fail": "real | None", "stop_value": "{absorbing, bootstrap}",
    "warmup": "bool",
    "warmup_baseline_steps": "int [1, inf)", "warmup_loss_frac": "(0, 1]",
    "warmup_rel_change": "[0, inf)", "warmup_patience": "int [1, inf)",
    "warmup_force_frac": "[0, 1]", "min_tokens": "int [1, inf)",
    "measure_false_positives": "bool"}


@CONTROLLERS.register("espo", diagnostics=STOP_DIAGNOSTICS, domains=DOMAINS, title="ESPO",
                      engagement="espo/stop_rate", twin={"controller": {"name": "none"}},
                      readings=("espo/stop_rate", "espo/false_positive_rate"),
                      source="arXiv 2605.29860",
                      summary="stops failing rollouts mid-flight when smoothed regret exceeds "
                              "beta * max(V, eps_v), after a relative critic warm-up; "
                              "absorbing r_fail")
class ESPO(StopAccounting):
    def __init__(self, *, mode: str = "full", beta: float = 2.0, adapt_beta: bool = False,
                 target_rate: float = 0.25, beta_lr: float = 0.1, beta_min: float = 0.05,
                 beta_max: float = 50.0, alpha_s: float = 0.9, eps_v: float = 0.2,
                 clip: float | None = None, ema_decay: float = 0.99,
                 r_fail: float | None = None,
                 warmup: bool = True, warmup_baseline_steps: int = 1,
                 warmup_loss_frac: float = 0.5, warmup_rel_change: float = 0.2,
                 warmup_patience: int = 3, warmup_force_frac: float = 0.1,
                 total_steps: int | None = None, min_tokens: int = 1,
                 measure_false_positives: bool = True, seed: int = 0,
                 failure_reward: float | None = 0.0, reward_range: tuple = (0.0, 1.0),
                 stop_value: str = "absorbing"):
        super().__init__(**self.shared(locals()))
        if mode not in MODES:
            raise ValueError(f"unknown ESPO mode {mode!r}; valid modes: {', '.join(MODES)} "
                             "(variant F is the random_stop controller)")
        if not 0 < target_rate < 1:
            raise ValueError(f"target_rate must be in (0, 1), got {target_rate}")
        if beta <= 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        if warmup_baseline_steps < 1 or warmup_patience < 1:
            raise ValueError("warmup_baseline_steps and warmup_patience must be >= 1")
        if not 0 < warmup_loss_frac <= 1 or warmup_rel_change < 0:
            raise ValueError("warmup_loss_frac must be in (0, 1] and warmup_rel_change >= 0")
        self.mode, self.beta, self.beta_min, self.beta_max = mode, beta, beta_min, beta_max
        self.beta_lr, self.adapt_beta, self.target_rate = beta_lr, adapt_beta, target_rate
        self.alpha_s, self.eps_v, self.clip, self.ema_decay = alpha_s, eps_v, clip, ema_decay
        self.total_steps = total_steps
        self.warmup_baseline_steps, self.warmup_loss_frac = warmup_baseline_steps, \
            warmup_loss_frac
        self.warmup_rel_change, self.warmup_patience = warmup_rel_change, warmup_patience
        self.warmup_force_frac = warmup_force_frac
        self.warmed = not warmup
        self.warmed_at = 0 if not warmup else -1  # the step after which stopping switched on
        self.mu_g: float | None = None
        self.var_g: float | None = None
        self.early_losses: list[float] = []
        self.calm_steps, self.last_value_loss = 0, None
        self._z = torch.zeros(0)

    # ------------------------------------------------------------ warm-up gate
    @property
    def value_loss_baseline(self) -> float | None:
        if len(self.early_losses) < self.warmup_baseline_steps:
            return None
        return sum(self.early_losses) / len(self.early_losses)

    def observe(self, row: dict, step: int) -> None:
        """After each update: the token accounting and the warm-up gate (`value/loss`)."""
        super().observe(row, step)
        if self.warmed:
            return
        loss = float(row.get("value/loss", math.inf))
        if len(self.early_losses) < self.warmup_baseline_steps:
            self.early_losses.append(loss)
        base = self.value_loss_baseline
        prev = self.last_value_loss
        calm = (base is not None and math.isfinite(loss) and loss <= self.warmup_loss_frac * base
                and prev is not None and abs(loss - prev) <= self.warmup_rel_change * prev)
        self.calm_steps = self.calm_steps + 1 if calm else 0
        self.last_value_loss = loss
        forced = self.total_steps is not None and step >= self.warmup_force_frac * self.total_steps
        if self.calm_steps >= self.warmup_patience or forced:
            self.warmed, self.warmed_at = True, step

    @property
    def active(self) -> bool:
        return self.warmed and not math.isinf(self.beta) and self.mu_g is not None

    @property
    def needs_values(self) -> bool:
        return self.mode in ("full", "value_only")

    # ------------------------------------------------------------ per batch
    def begin_batch(self, batch_size: int) -> None:
        super().begin_batch(batch_size)
        self._z = torch.zeros(batch_size)

    def step(self, rows: torch.Tensor, regret: torch.Tensor, values: torch.Tensor | None,
             t: int) -> torch.Tensor:
        """Stop decisions [len(rows)] for the active rows at step t (0-based)."""
        if not self.active or t + 1 < self.min_tokens:
            return torch.zeros(len(rows), dtype=torch.bool)
        g = ((regret.double() - self.mu_g) / math.sqrt(self.var_g + 1e-8))
        if self.clip is not None:
            g = g.clamp(-self.clip, self.clip)
        z = self.alpha_s * self._z[rows].double() + (1 - self.alpha_s) * g
        self._z[rows] = z.float()
        if self.needs_values:
            if values is None:
                raise ValueError(f"ESPO mode {self.mode!r} needs per-step values "
                                 "(pass value_fn to sample)")
            gate = values.double().clamp(min=self.eps_v)
        else:
            gate = torch.ones_like(z)
        signal = torch.ones_like(z) if self.mode == "value_only" else z
        stop = signal > self.beta * gate
        self._stopped[rows] |= stop
        return stop

    def end_batch(self, regret: torch.Tensor, lengths: torch.Tensor) -> None:
        """Update the regret EMAs (and, if adaptive, beta) from the finished batch."""
        super().end_batch(regret, lengths)
        valid = torch.arange(regret.shape[1])[None, :] < lengths[:, None]
        g = regret[valid].double()
        if g.numel():
            mean, var = float(g.mean()), float(g.var(unbiased=False))
            if self.mu_g is None:
                self.mu_g, self.var_g = mean, var
            else:
                d = self.ema_decay
                self.mu_g = d * self.mu_g + (1 - d) * mean
                self.var_g = d * self.var_g + (1 - d) * var
        if self.adapt_beta and self.warmed and not math.isinf(self.beta):
            self.beta = min(max(self.beta + self.beta_lr * (self.last_stop_rate
                                                            - self.target_rate),
                                self.beta_min), self.beta_max)

    def metrics(self) -> dict[str, float]:
        return super().metrics() | {
            "espo/beta": self.beta, "espo/warmed": float(self.warmed),
            "espo/warmed_at": float(self.warmed_at), "espo/mu_g": self.mu_g or 0.0,
            "espo/sigma_g": math.sqrt(self.var_g or 0.0)}

    # ------------------------------------------------------------ checkpoint
    _STATE = ("beta", "warmed", "warmed_at", "mu_g", "var_g", "early_losses", "calm_steps",
              "last_value_loss")

    def state_dict(self) -> dict:
        return self._state(self._STATE)

    def load_state_dict(self, state: dict) -> None:
        self._load(state, self._STATE)
        self.early_losses = list(self.early_losses)
