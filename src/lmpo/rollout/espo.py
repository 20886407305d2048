"""ESPO: early stopping of failing rollouts (arXiv 2605.29860).

At each decoding step, from quantities the sampler already has:

    g_t  = max_a log pi(a|s_t) - log pi(a_t|s_t)                  (regret)
    g~_t = clip((g_t - mu_g) / sqrt(sigma_g^2 + 1e-8), -c, c)
    z_t  = alpha_s z_{t-1} + (1 - alpha_s) g~_t,  z_0 = 0
    stop if warmed_up and z_t > beta * max(V(s_t), eps_v)

mu_g, sigma_g^2 are EMAs of the batch mean / variance of g, updated only in
`end_batch` (frozen during a rollout, so no row's future leaks into a decision).
beta moves toward a target stop rate after every batch. Ablations (`mode`):
"regret_only" (V replaced by 1), "value_only" (z replaced by 1), "random"
(stop each active row with a per-step probability set so that sequences of the
typical natural length are stopped at the target rate).
"""

from __future__ import annotations

import math

import torch

MODES = ("full", "regret_only", "value_only", "random")


class ESPO:
    def __init__(self, *, mode: str = "full", beta: float = 7.0, beta_min: float = 0.5,
                 beta_max: float = 50.0, beta_lr: float = 0.1, adapt_beta: bool = True,
                 target_rate: float = 0.25, alpha_s: float = 0.9, eps_v: float = 0.2,
                 clip: float = 5.0, ema_decay: float = 0.99, r_fail: float = -1.0,
                 warmup: bool = True, warmup_value_loss: float = 0.5,
                 warmup_value_delta: float = 0.1, warmup_patience: int = 3,
                 warmup_force_frac: float = 0.1, total_steps: int | None = None,
                 min_tokens: int = 1, seed: int = 0):
        if mode not in MODES:
            raise ValueError(f"unknown ESPO mode {mode!r}; valid modes: {', '.join(MODES)}")
        if not 0 < target_rate < 1:
            raise ValueError(f"target_rate must be in (0, 1), got {target_rate}")
        self.mode, self.beta, self.beta_min, self.beta_max = mode, beta, beta_min, beta_max
        self.beta_lr, self.adapt_beta, self.target_rate = beta_lr, adapt_beta, target_rate
        self.alpha_s, self.eps_v, self.clip, self.ema_decay = alpha_s, eps_v, clip, ema_decay
        self.r_fail, self.min_tokens, self.total_steps = r_fail, min_tokens, total_steps
        self.warmup_value_loss, self.warmup_value_delta = warmup_value_loss, warmup_value_delta
        self.warmup_patience, self.warmup_force_frac = warmup_patience, warmup_force_frac
        self.warmed = not warmup
        self.mu_g: float | None = None
        self.var_g: float | None = None
        self.natural_length: float | None = None  # EMA of lengths of rows that were not stopped
        self.calm_steps, self.last_value_loss, self.steps_seen = 0, None, 0
        self.last_stop_rate = 0.0
        self.gen = torch.Generator().manual_seed(seed)
        self._z = torch.zeros(0)
        self._stopped = torch.zeros(0, dtype=torch.bool)

    # ------------------------------------------------------------ warm-up gate
    def observe_value_loss(self, value_loss: float, step: int) -> None:
        """Feed the critic's loss after each update (the trainer does this).

        Stopping turns on once `warmup_patience` consecutive steps each have a
        value loss below `warmup_value_loss` or a step-to-step change below
        `warmup_value_delta`, or after `warmup_force_frac` of `total_steps`.
        """
        self.steps_seen = step
        calm = value_loss < self.warmup_value_loss or (
            self.last_value_loss is not None
            and abs(value_loss - self.last_value_loss) < self.warmup_value_delta)
        self.calm_steps = self.calm_steps + 1 if calm else 0
        self.last_value_loss = value_loss
        forced = self.total_steps is not None and step >= self.warmup_force_frac * self.total_steps
        if self.calm_steps >= self.warmup_patience or forced:
            self.warmed = True

    @property
    def active(self) -> bool:
        if not self.warmed or math.isinf(self.beta):
            return False
        return self.mode == "random" or self.mu_g is not None

    @property
    def needs_values(self) -> bool:
        return self.mode in ("full", "value_only")

    def random_rate(self) -> float:
        length = self.natural_length or 1.0
        return 1.0 - (1.0 - self.target_rate) ** (1.0 / max(length, 1.0))

    # ------------------------------------------------------------ per batch
    def begin_batch(self, batch_size: int) -> None:
        self._z = torch.zeros(batch_size)
        self._stopped = torch.zeros(batch_size, dtype=torch.bool)

    def step(self, rows: torch.Tensor, regret: torch.Tensor, values: torch.Tensor | None,
             t: int) -> torch.Tensor:
        """Stop decisions [len(rows)] for the active rows at step t (0-based)."""
        no = torch.zeros(len(rows), dtype=torch.bool)
        if not self.active or t + 1 < self.min_tokens:
            return no
        if self.mode == "random":
            stop = torch.rand(len(rows), generator=self.gen) < self.random_rate()
        else:
            g = ((regret.double() - self.mu_g) / math.sqrt(self.var_g + 1e-8))
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
        """Update the regret EMAs, the natural length and beta from the finished batch."""
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
        natural = lengths[~self._stopped[: len(lengths)]].double()
        if natural.numel():
            m = float(natural.mean())
            self.natural_length = m if self.natural_length is None else (
                self.ema_decay * self.natural_length + (1 - self.ema_decay) * m)
        rate = float(self._stopped.double().mean()) if len(self._stopped) else 0.0
        self.last_stop_rate = rate
        if self.adapt_beta and self.warmed and self.mode != "random" and not math.isinf(self.beta):
            self.beta = min(max(self.beta + self.beta_lr * (rate - self.target_rate),
                                self.beta_min), self.beta_max)

    def metrics(self) -> dict[str, float]:
        return {"espo/stop_rate": self.last_stop_rate, "espo/beta": self.beta,
                "espo/warmed": float(self.warmed), "espo/mu_g": self.mu_g or 0.0,
                "espo/sigma_g": math.sqrt(self.var_g or 0.0)}

    # ------------------------------------------------------------ checkpoint
    _STATE = ("beta", "warmed", "mu_g", "var_g", "natural_length", "calm_steps",
              "last_value_loss", "steps_seen", "last_stop_rate")

    def state_dict(self) -> dict:
        return {k: getattr(self, k) for k in self._STATE} | {"gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        for k in self._STATE:
            setattr(self, k, state[k])
        self.gen.set_state(state["gen"])
