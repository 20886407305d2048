"""`lmpo train` configuration: nested dataclasses, every field documented.

Defaults follow methods.md; the shipped presets (`lmpo presets`) set each method's choices.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from lmpo.config import ConfigError
from lmpo.registry import nearest
from lmpo.user_modules import import_user_modules

PROMPT_FORMATS = ("auto", "raw", "chat")
DEVICES = ("auto", "cpu", "cuda")
ROLLOUT_DTYPES = ("float32", "bfloat16")


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
    max_gen_batches: int = 1
    """With dynamic_sampling: generation rounds per step to refill the batch with varied
    groups (DAPO's over-sampling, verl's max_num_gen_batches); 1 = drop without refill."""
    dtype: str = "float32"
    """float32 | bfloat16: sample with a copy of the policy in this precision (the update
    stays float32). bfloat16 is the training-inference mismatch DPPO/DRPO study."""
    old_logp: str = "rollout"
    """Which log-probs anchor the ratio: rollout (recorded while sampling) | recompute (a
    float32 pass before the first update). rollout/logp_mismatch is logged on every step
    that has both: with recompute or a bfloat16 rollout, and on the diagnostic steps."""


@dataclass
class RewardConfig:
    fn: str = "task"
    """task (the task's own scorer) | exact | last_number | math_verify |
    path/to/file.py:function (TRL's shape: fn(prompts, completions, answers, **meta) ->
    list[float | None]; None drops the sample, counted in data/reward_none). With
    `model`, this is the checker: it decides accuracy and its mean is logged beside the RM's."""
    model: str | None = None
    """A frozen Bradley-Terry reward model (a folder from `lmpo rm`, or an rm preset name,
    trained once and cached) whose score is the reward; logs reward/rm_mean."""
    normalize: bool = False
    """With `model`: divide out the running mean and std of every score seen in training."""
    micro_batch_size: int = 64
    """With `model`: sequences per reward-model forward pass."""


@dataclass
class LoRAConfig:
    r: int = 0
    """Adapter rank; 0 = full fine-tuning. With r > 0 the reference policy is the base model
    with the adapters disabled (no second copy)."""
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


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
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass (less memory, ~1.3x time)."""
    shared_prefix: bool = True
    """Run each distinct prompt of a micro-batch once in the update's forward, its KV cache
    shared by the group's responses (same log-probs and gradients, less work)."""


@dataclass
class ESPOConfig:
    """The rollout controller: ESPO early stopping (arXiv 2605.29860) and its ablations."""

    enabled: bool = False
    mode: str = "full"
    """full | regret_only | value_only (ESPO), or random (variant F: random stopping at the
    token savings `savings` or of the `reference` run)."""
    warmup: bool = True
    """Critic warm-up gate (relative thresholds below); false = stop from the first batch."""
    r_fail: float = -1.0
    """Reward of a stopped sequence (absorbing failure); 0 is the 'no r_fail' ablation."""
    beta: float = 2.0
    """Stop threshold on the smoothed regret, hand-set as in the paper."""
    adapt_beta: bool = False
    """lmpo extension (espo_adaptive preset): move beta toward `target_rate` each batch."""
    target_rate: float = 0.25
    beta_lr: float = 0.1
    """With adapt_beta: beta += beta_lr * (stop_rate - target_rate) after each batch."""
    eps_v: float = 0.2
    alpha_s: float = 0.9
    min_tokens: int = 1
    """Tokens every sequence generates before any stop (lmpo choice)."""
    warmup_loss_frac: float = 0.5
    """Warm-up: the value loss must be at most this fraction of its first step's level..."""
    warmup_rel_change: float = 0.2
    """... and change by at most this fraction from one step to the next ..."""
    warmup_patience: int = 3
    """... for this many consecutive steps; forced on after 10% of the run."""
    savings: float | None = None
    """mode random: the cumulative token savings to match (a fraction in (0, 1))."""
    reference: str | None = None
    """mode random: an ESPO run (directory or metrics.jsonl) whose token curve to track."""
    measure_false_positives: bool = True
    """Finish a copy of each stopped sequence: logs espo/false_positive_rate,
    espo/would_be_length_mean and the measured savings (extra sampling, not counted in
    tokens/generated). Variant F at a savings fraction needs it."""


@dataclass
class LogConfig:
    eval_every: int = 10
    """Held-out evaluation every N steps (and before the first and after the last)."""
    eval_per_tier: int = 100
    """Held-out problems per tier (fewer where a tier has too few distinct problems)."""
    eval_max_new_tokens: int = 32
    eval_temperature: float = 0.0
    """0 = greedy; > 0 samples `eval_samples` completions per problem (accuracy = mean@k)."""
    eval_samples: int = 1
    checkpoint_every: int = 10
    keep_checkpoints: int = 2
    policy_kl_every: int = 5
    """On steps 1, 1+N, ...: KL to the reference, KL between consecutive policies (float32,
    before and after the update), the rollout's log-prob mismatch and the post-update
    diag/*_after diagnostics (one extra forward pass over the batch each)."""
    tensorboard: bool = True
    or_alpha: float | None = None
    """Margin for the post-update diag/or_* diagnostics of every ratio loss: None = the
    loss's own `alpha` if it has one (Output Reset), else OR's default 0.2."""


@dataclass
class TrainConfig:
    preset_kind: ClassVar[str] = "train"
    task: str = "chain_sum"
    """A built-in task (chain_sum, products, chain_sum_steps), any reasoning-gym dataset as
    rg:<dataset>, or a path to a JSONL dataset."""
    task_params: dict[str, Any] = field(default_factory=dict)
    """rg:<dataset> only: the dataset's parameters, and optional `tiers` (name -> parameters)."""
    prompt_format: str = "auto"
    """raw (the prompt text as it is) | chat (the tokenizer's chat template, the problem as
    the user turn) | auto (chat when the policy's tokenizer ships a chat template)."""
    system_prompt: str | None = None
    """chat only: a system turn before the problem (None = the template's own default)."""
    device: str = "cpu"
    """auto (CUDA when present, else CPU) | cpu | cuda: where the policy, reference, critic
    and every tensor they see live."""
    policy: str = "nano-chain-sum"
    """Starting policy: a local Hugging Face folder, or the name of an SFT preset (built and
    warm-started on first use, then reused from the user cache: `lmpo.warmstart`)."""
    steps: int = 40
    seed: int = 0
    threads: int = 2
    max_nonfinite: int = 3
    """Consecutive non-finite updates tolerated (each is skipped) before the run stops."""
    scorer_errors: str = "raise"
    """"raise": a scorer exception stops the run; "zero": score 0 and count it."""
    imports: list[str] = field(default_factory=list)
    """Python modules (dotted names) or .py files imported before anything is built, so that
    your own losses, estimators or controllers register themselves (README: your own
    method)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    espo: ESPOConfig = field(default_factory=ESPOConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def actor_critic(self) -> bool:
        """The estimator needs a critic (registry metadata `needs_critic`: GAE)."""
        from lmpo.advantages import advantage_meta, list_advantages

        return (self.advantage.name in list_advantages()
                and advantage_meta(self.advantage.name)["needs_critic"])

    def estimator_kwargs(self) -> dict[str, Any]:
        a = self.advantage
        extra = {"gamma": a.gamma, "lam": a.lam, "whiten": a.whiten} if self.actor_critic else {}
        return extra | a.hparams

    def bind(self) -> Bound:
        """The loss, aggregation, estimator and rollout controller this config names, built
        (and, for the loss, called once on a dummy token) so that every bad value fails
        here as a ConfigError naming its key."""
        import torch

        from lmpo.advantages import get_advantage
        from lmpo.losses import default_aggregation, get_loss
        from lmpo.rollout import build_controller

        def bound(key: str, make):
            try:
                return make()
            except (KeyError, TypeError, ValueError) as exc:
                raise ConfigError(f"{key}: {exc.args[0] if exc.args else exc}") from None

        loss_fn = bound("loss", lambda: get_loss(self.loss.name, **self.loss.hparams))
        one = torch.ones(1, 1)
        bound("loss.hparams", lambda: loss_fn(one - 2, one - 2, one[0], one))
        estimator = bound("advantage", lambda: get_advantage(self.advantage.name,
                                                             **self.estimator_kwargs()))
        controller = bound("espo", lambda: build_controller(
            asdict(self.espo), total_steps=self.steps, seed=self.seed))
        return Bound(loss_fn, self.loss.agg or default_aggregation(self.loss.name), estimator,
                     controller)

    def validate(self) -> None:
        """Fail before any work: every name resolves, every number is in range."""
        from lmpo.advantages import list_advantages
        from lmpo.losses import AGG_MODES, KL_KINDS
        from lmpo.tasks import SAMPLER_KINDS, TASKS

        r, o, lg, e = self.rollout, self.optim, self.log, self.espo
        import_user_modules(self.imports)
        names = list_advantages()
        if self.advantage.name not in names:
            raise ConfigError(f"unknown advantage {self.advantage.name!r}"
                              f"{nearest(self.advantage.name, names)}; valid: {', '.join(names)}")
        positive = {"steps": self.steps, "threads": self.threads,
                    "max_nonfinite": self.max_nonfinite, "rollout.batch_size": r.batch_size,
                    "rollout.group_size": r.group_size, "rollout.max_new_tokens": r.max_new_tokens,
                    "rollout.pool_size": r.pool_size, "rollout.max_gen_batches": r.max_gen_batches,
                    "optim.epochs": o.epochs,
                    "optim.minibatches": o.minibatches,
                    "optim.micro_batch_size": o.micro_batch_size, "log.eval_every": lg.eval_every,
                    "log.eval_per_tier": lg.eval_per_tier,
                    "log.eval_max_new_tokens": lg.eval_max_new_tokens,
                    "log.eval_samples": lg.eval_samples,
                    "log.checkpoint_every": lg.checkpoint_every,
                    "log.policy_kl_every": lg.policy_kl_every,
                    "reward.micro_batch_size": self.reward.micro_batch_size}
        checks = [(v >= 1, f"{k} must be >= 1, got {v}") for k, v in positive.items()]
        checks += [
            (r.batch_size % max(r.group_size, 1) == 0,
             f"rollout.batch_size {r.batch_size} is not divisible by rollout.group_size "
             f"{r.group_size}"),
            (r.temperature > 0, f"rollout.temperature must be > 0, got {r.temperature}"),
            (r.max_gen_batches == 1 or (r.dynamic_sampling and not self.actor_critic),
             f"rollout.max_gen_batches {r.max_gen_batches} refills dynamic sampling's batch: it "
             "needs rollout.dynamic_sampling and the group family"),
            (r.sampler in SAMPLER_KINDS,
             f"rollout.sampler {r.sampler!r} unknown; valid: {', '.join(SAMPLER_KINDS)}"),
            (o.lr > 0, f"optim.lr must be > 0, got {o.lr}"),
            (o.grad_clip > 0, f"optim.grad_clip must be > 0, got {o.grad_clip}"),
            (self.critic.lr > 0, f"critic.lr must be > 0, got {self.critic.lr}"),
            (self.critic.value_coef > 0 or not self.actor_critic,
             f"critic.value_coef must be > 0 for the actor-critic family (the critic would not "
             f"learn), got {self.critic.value_coef}"),
            (r.batch_size % o.minibatches == 0,
             f"rollout.batch_size {r.batch_size} is not divisible by optim.minibatches "
             f"{o.minibatches}"),
            (lg.eval_temperature >= 0,
             f"log.eval_temperature must be >= 0, got {lg.eval_temperature}"),
            (lg.eval_samples == 1 or lg.eval_temperature > 0,
             "log.eval_samples > 1 needs log.eval_temperature > 0 (greedy decoding repeats)"),
            (self.loss.agg is None or self.loss.agg in AGG_MODES,
             f"loss.agg {self.loss.agg!r} unknown; valid: {', '.join(AGG_MODES)}"),
            (self.kl.kind in KL_KINDS, f"kl.kind {self.kl.kind!r} unknown; valid: {KL_KINDS}"),
            (self.kl.mode in ("loss", "reward"),
             f"kl.mode must be loss|reward, got {self.kl.mode!r}"),
            (self.kl.mode == "loss" or self.actor_critic,
             "kl.mode=reward needs the actor-critic family (advantage.name=gae)"),
            (self.kl.coef >= 0, f"kl.coef must be >= 0, got {self.kl.coef}"),
            (not e.enabled or self.actor_critic or e.mode in ("regret_only", "random"),
             f"espo.mode {e.mode!r} needs the critic: set advantage.name=gae"),
            (e.mode == "random" or (e.savings is None and e.reference is None),
             "espo.savings and espo.reference apply only to espo.mode=random (variant F)"),
            (not (e.enabled and e.mode == "random" and e.savings is not None
                  and not e.measure_false_positives),
             "espo.mode=random with espo.savings measures savings by finishing stopped "
             "copies: set espo.measure_false_positives=true"),
            (self.scorer_errors in ("raise", "zero"),
             f"scorer_errors must be raise|zero, got {self.scorer_errors!r}"),
            (self.task in TASKS or self.task.endswith(".jsonl") or self.task.startswith("rg:"),
             f"unknown task {self.task!r}; valid tasks: {', '.join(TASKS)}, "
             "rg:<reasoning-gym dataset> or a .jsonl path"),
            (not self.task_params or self.task.startswith("rg:"),
             f"task_params apply only to rg:<dataset> tasks, not {self.task!r}"),
            (self.prompt_format in PROMPT_FORMATS,
             f"prompt_format {self.prompt_format!r} unknown; valid: {', '.join(PROMPT_FORMATS)}"),
            (self.device in DEVICES,
             f"device {self.device!r} unknown; valid: {', '.join(DEVICES)}"),
            (r.dtype in ROLLOUT_DTYPES,
             f"rollout.dtype {r.dtype!r} unknown; valid: {', '.join(ROLLOUT_DTYPES)}"),
            (self.lora.r >= 0 and self.lora.alpha > 0 and 0 <= self.lora.dropout < 1,
             f"lora needs r >= 0, alpha > 0 and 0 <= dropout < 1, got {self.lora}"),
            (r.old_logp in ("rollout", "recompute"),
             f"rollout.old_logp must be rollout|recompute, got {r.old_logp!r}"),
            (self.reward.model is not None or not self.reward.normalize,
             "reward.normalize applies only with reward.model (a reward model's scores)"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ConfigError(msg)
        from lmpo.rewards import build_reward

        build_reward(self.reward.fn, None)  # an unknown name or a missing function fails now
        self.bind()


@dataclass
class Bound:
    """What a config names, built: see `TrainConfig.bind`."""

    loss_fn: Any
    agg: str
    estimator: Any
    controller: Any
