"""`lmpo train` configuration: nested dataclasses, every field documented.

Defaults follow methods.md; the presets in configs/ set each method's choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lmpo.registry import nearest
from lmpo.trainer.config import ConfigError


@dataclass
class RolloutConfig:
    batch_size: int = 64
    """Sequences per step (prompts_per_step * group_size)."""
    group_size: int = 4
    """Responses per prompt (G). Must divide batch_size."""
    max_new_tokens: int = 24
    temperature: float = 1.0
    sampler: str = "shuffled"
    """Prompt order: shuffled | clustered | easy_to_hard (curriculum)."""
    pool_size: int = 4096
    """Training problems drawn once from the task; the sampler cycles through them."""
    clusters: list[str] | None = None
    """Train on these tiers only (None = all); evaluation always covers every tier."""
    dynamic_sampling: bool = False
    """DAPO: drop groups whose rewards are all equal (counted in data/groups_dropped)."""


@dataclass
class LossConfig:
    name: str = "ppo_clip"
    """Any name from lmpo.losses.list_losses()."""
    hparams: dict[str, Any] = field(default_factory=dict)
    agg: str | None = None
    """Aggregation mode; None = the method's default (lmpo.losses.default_aggregation)."""


@dataclass
class AdvantageConfig:
    name: str = "grpo"
    """"gae" (actor-critic PPO family, trains a critic) or any lmpo.advantages estimator."""
    hparams: dict[str, Any] = field(default_factory=dict)
    gamma: float = 1.0
    lam: float = 0.95
    whiten: bool = True
    """GAE only: whiten advantages over the batch's valid tokens."""


@dataclass
class CriticConfig:
    lr: float = 1e-3
    value_coef: float = 0.5
    value_clip: float | None = 0.2
    """Clip the new value to old +- value_clip (PPO's clipped value loss); None = off."""


@dataclass
class KLConfig:
    coef: float = 0.0
    """Strength of the KL to the frozen reference policy (0 = no reference model)."""
    kind: str = "k3"
    mode: str = "loss"
    """"loss": add coef * KL as a loss term; "reward": subtract coef * k1 from token rewards
    (PPO-style, only for the gae family)."""


@dataclass
class OptimConfig:
    lr: float = 5e-5
    warmup_steps: int = 3
    """Linear learning-rate warm-up, then constant."""
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    epochs: int = 1
    """K: passes over each rollout batch."""
    minibatches: int = 1
    """Optimiser steps per epoch (the batch is shuffled and split)."""
    micro_batch_size: int = 64
    """Sequences per forward/backward; gradients accumulate with global token counts."""
    entropy_coef: float = 0.0


@dataclass
class ESPOConfig:
    enabled: bool = False
    mode: str = "full"
    """full | regret_only | value_only | random."""
    warmup: bool = True
    r_fail: float = -1.0
    target_rate: float = 0.25
    beta: float = 7.0
    beta_lr: float = 0.1
    """beta += beta_lr * (stop_rate - target_rate) after each batch."""
    eps_v: float = 0.2
    alpha_s: float = 0.9
    min_tokens: int = 1
    measure_false_positives: bool = True
    """Finish a copy of each stopped sequence to log espo/false_positive_rate and
    espo/would_be_length_mean (extra sampling, not counted in tokens/generated)."""


@dataclass
class LogConfig:
    eval_every: int = 10
    """Greedy held-out evaluation every N steps (and at the end)."""
    eval_per_tier: int = 100
    eval_max_new_tokens: int = 32
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    policy_kl_every: int = 5
    """Measure KL to the reference and between consecutive policies on steps 1, 1+N, ...
    (each costs one extra forward pass over the batch; computed every step when kl.coef > 0
    needs the reference anyway)."""
    tensorboard: bool = True


@dataclass
class TrainConfig:
    task: str = "chain_sum"
    """A built-in task (chain_sum, products) or a path to a JSONL dataset."""
    policy: str = "runs/sft/chain_sum_nano"
    """Starting policy: a local Hugging Face folder (`lmpo sft` makes one)."""
    steps: int = 40
    seed: int = 0
    threads: int = 2
    max_nonfinite: int = 3
    """Consecutive non-finite updates tolerated (each is skipped) before the run stops."""
    scorer_errors: str = "raise"
    """"raise": a scorer exception stops the run; "zero": score 0 and count it."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    espo: ESPOConfig = field(default_factory=ESPOConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def actor_critic(self) -> bool:
        return self.advantage.name == "gae"

    def validate(self) -> None:
        """Fail before any work: every name resolves, every number is in range."""
        from lmpo.advantages import get_advantage, list_advantages
        from lmpo.losses import AGG_MODES, KL_KINDS, get_loss
        from lmpo.tasks import SAMPLER_KINDS, TASKS

        r, o = self.rollout, self.optim
        checks = [
            (self.steps >= 1, f"steps must be >= 1, got {self.steps}"),
            (r.batch_size >= 1 and r.group_size >= 1,
             f"rollout.batch_size and rollout.group_size must be >= 1, got {r.batch_size}, "
             f"{r.group_size}"),
            (r.batch_size % max(r.group_size, 1) == 0,
             f"rollout.batch_size {r.batch_size} is not divisible by rollout.group_size "
             f"{r.group_size}"),
            (r.max_new_tokens >= 1, "rollout.max_new_tokens must be >= 1"),
            (r.temperature > 0, f"rollout.temperature must be > 0, got {r.temperature}"),
            (r.sampler in SAMPLER_KINDS,
             f"rollout.sampler {r.sampler!r} unknown; valid: {', '.join(SAMPLER_KINDS)}"),
            (o.lr > 0, f"optim.lr must be > 0, got {o.lr}"),
            (self.critic.lr > 0, f"critic.lr must be > 0, got {self.critic.lr}"),
            (o.epochs >= 1 and o.minibatches >= 1 and o.micro_batch_size >= 1,
             "optim.epochs, optim.minibatches and optim.micro_batch_size must be >= 1"),
            (r.batch_size % o.minibatches == 0,
             f"rollout.batch_size {r.batch_size} is not divisible by optim.minibatches "
             f"{o.minibatches}"),
            (self.loss.agg is None or self.loss.agg in AGG_MODES,
             f"loss.agg {self.loss.agg!r} unknown; valid: {', '.join(AGG_MODES)}"),
            (self.kl.kind in KL_KINDS, f"kl.kind {self.kl.kind!r} unknown; valid: {KL_KINDS}"),
            (self.kl.mode in ("loss", "reward"),
             f"kl.mode must be loss|reward, got {self.kl.mode!r}"),
            (self.kl.mode == "loss" or self.actor_critic,
             "kl.mode=reward needs the gae (actor-critic) family"),
            (self.kl.coef >= 0, f"kl.coef must be >= 0, got {self.kl.coef}"),
            (not self.espo.enabled or self.actor_critic
             or self.espo.mode in ("regret_only", "random"),
             f"espo mode {self.espo.mode!r} needs the critic: set advantage.name=gae"),
            (self.scorer_errors in ("raise", "zero"),
             f"scorer_errors must be raise|zero, got {self.scorer_errors!r}"),
            (self.task in TASKS or self.task.endswith(".jsonl"),
             f"unknown task {self.task!r}; valid tasks: {', '.join(TASKS)} or a .jsonl path"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        names = ["gae", *list_advantages()]
        if self.advantage.name not in names:
            raise ConfigError(f"unknown advantage {self.advantage.name!r}"
                              f"{nearest(self.advantage.name, names)}; valid: {', '.join(names)}")
        try:
            get_loss(self.loss.name, **self.loss.hparams)
            if not self.actor_critic:
                get_advantage(self.advantage.name, **self.advantage.hparams)
        except (KeyError, TypeError) as exc:
            raise ConfigError(str(exc.args[0] if exc.args else exc)) from None
