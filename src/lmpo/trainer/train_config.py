"""`lmpo train` configuration: nested dataclasses, every field documented.

The shipped presets (`lmpo presets`) set each method's choices. The config is data: a
field that takes a number or a name declares its domain (`dom`; the names themselves in
`lmpo.choices`), `validate` (`lmpo.trainer.validate`) checks the domains and the joint
rules before work starts, and the trainer builds the parts it names
(`lmpo.trainer.parts`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from lmpo.choices import (
    CENTERING_MODES,
    CRITIC_INITS,
    DEVICES,
    KL_KINDS,
    KL_MODES,
    OLD_LOGP,
    PROMPT_FORMATS,
    REWARD_SCALES,
    ROLLOUT_DTYPES,
    SAMPLER_KINDS,
    SCORER_ERRORS,
    UPDATE_DTYPES,
    one_of,
)
from lmpo.config import ConfigError, flat_config
from lmpo.domains import dom
from lmpo.legacy import replaced
from lmpo.masked import ALL_AGG_MODES
from lmpo.registry import DEFAULT_CONTROLLER, DEFAULT_ESTIMATOR, DEFAULT_LOSS
from lmpo.trainer.log_config import LogConfig
from lmpo.trainer.parts import needs_critic
from lmpo.trainer.testbed_keys import check_testbed_keys
from lmpo.trainer.validate import validate


@dataclass
class CorrectionConfig:
    """A rollout correction (lmpo.rollout.corrections): weights from the behaviour
    log-probs against a float32 recompute that the correction runs itself, applied to each
    token's loss (verl's rollout_is_weights) and/or to the update's mask (its rejection)."""

    kind: str | None = None
    """None (off) | tis | seq_tis | icepop | mis | seq_mask_tis | rs_<verl rollout_rs mode>
    (lmpo.rollout.list_corrections())."""
    hparams: dict[str, Any] = field(default_factory=dict)
    """The kind's thresholds (lmpo.rollout.correction_hparams(kind))."""
    chain: list[dict] = field(default_factory=list)
    """Several kinds in order, each `{kind, hparams}` (lmpo.rollout.corrections.chain):
    masks multiplied, at most one importance weight, as verl's presets that pair an IS
    weight with rejection criteria. Written as a list in place of the mapping:
    `rollout.correction: [{kind: rs_seq_mean_k1}, {kind: tis, hparams: {upper: 2}}]`."""

    @classmethod
    def from_list(cls, items: list, where: str) -> dict:
        """The mapping a list written for `rollout.correction` stands for."""
        if not items:
            raise ConfigError(f"{where}: an empty list; leave it out (no correction) or list "
                              "one or more {kind, hparams}")
        for i, item in enumerate(items):
            if not isinstance(item, dict) or "kind" not in item or \
                    set(item) - {"kind", "hparams"}:
                raise ConfigError(f"{where}[{i}]: expected a mapping with kind (and hparams), "
                                  f"got {item!r}")
        return {"chain": items} if len(items) > 1 else dict(items[0])

    def links(self) -> list[tuple[str, dict]]:
        """`[(kind, hparams), ...]`: the chain, the one kind, or nothing."""
        if self.chain:
            return [(item["kind"], dict(item.get("hparams") or {})) for item in self.chain]
        return [] if self.kind is None else [(self.kind, dict(self.hparams))]


@dataclass
class RolloutConfig:
    batch_size: int = dom(64, "int [1, inf)")
    """Sequences per step (prompts_per_step * group_size)."""
    group_size: int = dom(4, "int [1, inf)")
    """Responses per prompt (G). Must divide batch_size."""
    max_new_tokens: int = dom(24, "int [1, inf)")
    temperature: float = dom(1.0, "(0, inf)")
    sampler: str = dom("shuffled", one_of(SAMPLER_KINDS))
    """Prompt order: shuffled | clustered | easy_to_hard (curriculum)."""
    pool_size: int = dom(4096, "int [1, inf)")
    """Training problems drawn once from the task; the sampler cycles through them."""
    clusters: list[str] | None = None
    """Train on these tiers only (None = all); evaluation always covers every tier."""
    dynamic_sampling: bool = False
    """Drop groups whose rewards are all equal (counted in data/groups_dropped): the batch
    filter `lmpo.trainer.filters.VariedGroups`. Group family only."""
    max_gen_batches: int = dom(1, "int [1, inf)")
    """With dynamic_sampling: generation rounds per step to refill the batch with varied
    groups (over-sampling, verl's max_num_gen_batches); 1 = drop without refill."""
    dtype: str = dom("float32", one_of(ROLLOUT_DTYPES))
    """float32 | bfloat16 | float16 | fp8_e4m3 | fp4_e2m1 | mxfp8: sample with a copy of the policy
    in this precision (the update stays float32): a training-inference mismatch, as
    low-precision inference engines create. fp8_e4m3 simulates an FP8 engine: e4m3 weights
    with per-output-channel scales in the decoder's linear layers, bfloat16 elsewhere;
    fp4_e2m1 an NVFP4 one (16-value blocks with e4m3 scales) on the same layers, mxfp8
    an MXFP8 one (32-value blocks of e4m3 with power-of-two scales)
    (lmpo.rollout.precision, docs/precision.md)."""
    fp8_activations: bool = True
    """fp8_e4m3, fp4_e2m1 and mxfp8: also quantise the input of every quantised linear layer, per
    token (W8A8 / W4A4, as FP8 and NVFP4 serving do); false = weights only (W8A16 /
    W4A16)."""
    bf16_boundary: bool = False
    """fp8_e4m3, fp4_e2m1 and mxfp8: keep the first and the last decoder layers in bfloat16 (their
    weights and inputs unquantised), as NVFP4 recipes do (the LM head and the embeddings
    always stay bfloat16); needs >= 3 decoder layers."""
    staleness: int = dom(0, "int [0, inf)")
    """k: sample with the policy as it was k training steps earlier (an asynchronous
    engine's lag), behaviour log-probs from that policy; 0 = on-policy sampling
    (lmpo.trainer.history)."""
    old_logp: str = dom("rollout", one_of(OLD_LOGP))
    """Which log-probs anchor the ratio: rollout (recorded while sampling) | recompute (a
    float32 pass before the first update). rollout/logp_mismatch (mean and _p99 over
    tokens) is logged on every step that has both: with recompute, a low-precision or
    stale rollout, a correction, and on the diagnostic steps."""
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)
    """Importance weights or rejection for the rollout-update mismatch, for any loss."""


@dataclass
class OverlongConfig:
    """The soft overlong penalty (verl's `overlong_buffer`; lmpo.trainer.length): a response
    of L > B - buffer_len tokens (B = rollout.max_new_tokens) loses
    (L - B + buffer_len) / buffer_len * penalty_factor from its score."""

    buffer_len: int = dom(0, "int [0, inf)")
    """Tokens before the budget where the penalty starts; 0 = off."""
    penalty_factor: float = dom(1.0, "[0, inf)")
    """The penalty at the budget itself."""


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
    micro_batch_size: int = dom(64, "int [1, inf)")
    """With `model`: sequences per reward-model forward pass."""
    scale: str = dom("none", one_of(REWARD_SCALES))
    """none | pm1: map the checker's scores s in [0, 1] to 2s - 1 ({0, 1} -> {-1, +1}, as
    CE-GPPO's and DPPO's scripts score); not for a reward model's scores."""
    extra: list[str] = field(default_factory=list)
    """Further reward functions (names as `fn`, e.g. answer_format, or file.py:function),
    scored raw and summed with the checker's score: TRL's several `reward_funcs`
    (lmpo.rewards.multi). Each is logged as reward/fn/<name>_mean; `fn` alone decides
    accuracy. An estimator registered with wants_parts normalises each function on
    its own."""
    weights: list[float] = field(default_factory=list)
    """One weight per function, `fn` first, then each of `extra` (TRL's reward_weights);
    empty = every weight 1."""
    timeout_s: float | None = dom(300.0, "(0, inf) | None")
    """A user function (file.py:function) runs in a worker process, each call stopped
    after this many seconds with one line naming the sample that hangs; None calls it in
    the trainer's process without a limit (lmpo.reward_worker). Every user score
    must be finite and within +-1e6 (lmpo.rewards.MAX_ABS_REWARD)."""
    overlong: OverlongConfig = field(default_factory=OverlongConfig)
    """The soft overlong penalty, added to every response's score: {buffer_len,
    penalty_factor}."""


@dataclass
class LoRAConfig:
    r: int = dom(0, "int [0, inf)")
    """Adapter rank; 0 = full fine-tuning. With r > 0 the reference policy is the base model
    with the adapters disabled (no second copy)."""
    alpha: float = dom(16.0, "(0, inf)")
    dropout: float = dom(0.0, "[0, 1)")
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])


@dataclass
class LossConfig:
    name: str = DEFAULT_LOSS
    """Any name from lmpo.losses.list_losses()."""
    hparams: dict[str, Any] = field(default_factory=dict)
    agg: str | None = dom(None, one_of(ALL_AGG_MODES) + " | None")
    """Aggregation mode; None = the method's default (lmpo.losses.default_aggregation)."""
    nll_coef: float = dom(0.0, "[0, inf)")
    """Add nll_coef x the NLL of the correct responses (aggregated as the loss is, over
    their tokens), for any loss: CE-GPPO's scripts' positive_loss_coeff (0.1 there)."""
    off_policy_mask_threshold: float | None = dom(None, "[0, inf) | None")
    """For any loss: leave out of the loss the negative-advantage tokens of a response
    whose mean KL(pi_old || pi) exceeds this (DeepSeek-V3.2's OPSM; TRL's name;
    lmpo.losses.masks). pi_old is the anchor rollout.old_logp names: the sampler's
    log-probs by default. None = off."""
    seq_divergence_threshold: float | None = dom(None, "[0, inf) | None")
    """For any loss: the sequence divergence mask (arXiv 2603.01365, as open-instruct
    implements it): a response whose mean per-token binary divergence between pi_old (the
    float32 policy before the update) and the sampler exceeds this leaves the loss, token
    by token where the token moved away from the sampler in its advantage's direction
    (lmpo.losses.masks). None = off."""
    seq_divergence_kind: str = dom("tv", "{tv, kl}")
    """Its binary divergence: tv (|mu - pi_old| on the sampled token) or kl."""
    seq_divergence_directional: bool = True
    """Drop only the tokens that move away from the sampler (open-instruct's
    increase_only); false drops the whole response."""
    centered_score: str | None = dom(None, one_of(CENTERING_MODES) + " | None")
    """For a loss whose per-token loss is -A log pi (registered with score_function):
    subtract the sampler's expected score at every prefix (arXiv 2609.20807; SkyRL's
    score centering): full (the whole vocabulary, exact), topk (the
    sampler's top k with the tail spread in proportion to pi, as the paper and PRs) or
    topk_renorm (the top k renormalised) (lmpo.losses.centering). None = off."""
    centered_score_k: int = dom(32, "int [1, inf)")
    """The sampler's top k that topk and topk_renorm read (32, as SkyRL's validation run)."""
    top_entropy_quantile: float = dom(1.0, "(0, 1]")
    """For any loss: train only on the tokens whose entropy is in the top q of the
    minibatch's response tokens (Wang et al. 2025, "Beyond the 80/20 rule": q = 0.2; TRL's
    name). 1.0 = every token."""
    mask_truncated: bool = False
    """Leave responses that reached rollout.max_new_tokens without ending out of the loss
    and its token counts (their rewards still count in their groups' advantages): TRL's
    mask_truncated_completions (lmpo.trainer.length)."""


@dataclass
class AdvantageConfig:
    replaced_keys: ClassVar[dict[str, str]] = replaced("advantage")
    name: str = DEFAULT_ESTIMATOR
    """Any lmpo.advantages estimator; one registered with `needs_critic` trains a critic
    (the actor-critic family)."""
    hparams: dict[str, Any] = field(default_factory=dict)
    """The estimator's hyper-parameters (lmpo.advantages.advantage_hparams(name))."""


@dataclass
class CriticConfig:
    lr: float = dom(1e-3, "(0, inf)")
    value_coef: float = 0.5
    value_clip: float | None = 0.2
    """Clip the new value to old +- value_clip (PPO's clipped value loss); None = off."""
    init: str = dom("zero", one_of(CRITIC_INITS))
    """zero | random: the value head's initial weights (the trunk is always a copy of the
    policy's). zero: V = 0 everywhere at the start; random: torch's default nn.Linear
    initialisation, drawn from the run's seed (as a critic with a fresh head starts in
    verl or OpenRLHF, and as an early-stopping critic is described)."""


@dataclass
class ScheduleConfig:
    """A coefficient schedule (lmpo.trainer.schedules), started at the configured
    coefficient: fixed | adaptive_kl (verl's) | adaptive_entropy (TRL's)."""

    name: str = "fixed"
    hparams: dict[str, Any] = field(default_factory=dict)


@dataclass
class KLConfig:
    coef: float = dom(0.0, "[0, inf)")
    """Strength of the KL to the frozen reference policy (0 = no reference model)."""
    kind: str = dom("k3", one_of(KL_KINDS))
    """k1 | k2 | k3 (verl's low_var_kl) | abs; with `+` (k1+, k3+, abs+: verl's
    straight-through kinds) the value of that estimator and the gradient of k2."""
    mode: str = dom("loss", one_of(KL_MODES))
    """"loss": add coef * KL as a loss term; "reward": subtract coef * k1 from token rewards
    (PPO-style, only for the actor-critic family)."""
    bias_correction: bool = False
    """kl.mode loss: multiply each token's KL estimate by its ratio pi / pi_old
    (differentiable), so that samples from pi_old estimate KL(pi || ref) without bias
    (DeepSeek-V3.2; TRL's use_bias_correction_kl, on by default there)."""
    ref_sync_every: int = dom(0, "int [0, inf)")
    """N > 0: after every N-th step move the reference toward the policy, ref <- (1 -
    alpha) ref + alpha pi (TRL's sync_ref_model / ref_model_sync_steps; TR-DPO); the
    reference is then checkpointed with the run. 0 = a frozen reference."""
    ref_sync_alpha: float = dom(0.6, "(0, 1]")
    """The mix of each sync (TRL's ref_model_mixup_alpha, 0.6 by default there)."""
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """fixed | adaptive_kl {target_kl: 0.1, horizon: 10000} (verl's kl_ctrl.type:
    adaptive): the coefficient starts at `coef` and moves after each step with the batch's
    KL to the reference (lmpo.trainer.schedules; checkpointed)."""


@dataclass
class OptimConfig:
    lr: float = dom(5e-5, "(0, inf)")
    warmup_steps: int = 3
    """Linear learning-rate warm-up, then constant."""
    weight_decay: float = dom(0.0, "[0, inf)")
    grad_clip: float = dom(1.0, "(0, inf)")
    epochs: int = dom(1, "int [1, inf)")
    """K: passes over each rollout batch."""
    minibatches: int = dom(1, "int [1, inf)")
    """Optimiser steps per epoch (the batch is shuffled and split)."""
    micro_batch_size: int = dom(64, "int [1, inf)")
    """Sequences per forward/backward; gradients accumulate with global token counts."""
    entropy_coef: float = 0.0
    entropy_schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    """fixed | adaptive_entropy {target: 0.2, delta: 0.005, coef_min: 0, coef_max: 1} (TRL's
    use_adaptive_entropy, Skywork-OR1): the bonus starts at `entropy_coef`, moves after
    each optimiser step and acts only while the entropy is at or below the target."""
    gradient_checkpointing: bool = False
    """Recompute each layer's activations in the backward pass (less memory, ~1.3x time)."""
    shared_prefix: bool = True
    """Run each distinct prompt of a micro-batch once in the update's forward, its KV cache
    shared by the group's responses (same log-probs and gradients, less work)."""
    dtype: str = dom("float32", one_of(UPDATE_DTYPES))
    """float32 | bfloat16: the update's compute precision. bfloat16 runs the forward and
    backward of the policy (and critic) under torch.autocast, as verl's FSDP mixed precision
    trains: matmuls in bfloat16, master weights, gradients and optimiser state float32, and
    the log-softmax, ratios and losses in float32 (lmpo.trainer.update, docs/precision.md).
    The log-prob recompute and the reference's pass run in it too (the first ratio is 1);
    evaluation stays float32; the rollout's precision is rollout.dtype."""


@dataclass
class ControllerConfig:
    """What may end a response during decoding: a registered rollout controller."""

    name: str = DEFAULT_CONTROLLER
    """Any name from lmpo.rollout.list_controllers() (by default one that stops nothing)."""
    hparams: dict[str, Any] = field(default_factory=dict)
    """The controller's hyper-parameters (lmpo.rollout.controller_hparams(name))."""


@dataclass
class TrainConfig:
    preset_kind: ClassVar[str] = "train"
    replaced_keys: ClassVar[dict[str, str]] = replaced()
    """Keys of earlier lmpo versions: a config that uses one fails with what replaced it."""
    task: str = "chain_sum"
    """A built-in task (chain_sum, products, chain_sum_steps, chain_sum_long), any
    reasoning-gym dataset as rg:<dataset>, or a path to a JSONL dataset."""
    task_params: dict[str, Any] = field(default_factory=dict)
    """rg:<dataset> only: the dataset's parameters, and optional `tiers` (name -> parameters)."""
    prompt_format: str = dom("auto", one_of(PROMPT_FORMATS))
    """raw (the prompt text as it is) | chat (the tokenizer's chat template, the problem as
    the user turn) | auto (chat when the policy's tokenizer ships a chat template)."""
    system_prompt: str | None = None
    """chat only: a system turn before the problem (None = the template's own default)."""
    device: str = dom("auto", one_of(DEVICES))
    """auto (CUDA when present, else CPU) | cpu | cuda: where the policy, reference, critic
    and every tensor they see live (lmpo.devices)."""
    policy: str = "nano-chain-sum"
    """Starting policy: a local Hugging Face folder, or the name of an SFT preset (built and
    warm-started on first use, then reused from the user cache: `lmpo.warmstart`)."""
    policy_seed: int | None = dom(None, "int [0, inf) | None")
    """The seed of an SFT preset's warm start (its own SFT draw; None: the preset's seed).
    `lmpo compare` sets it to each run's seed (`warm_starts: per_seed`), so seeds
    replicate the whole pipeline; a folder or a packaged model ignores it."""
    steps: int = dom(40, "int [1, inf)")
    seed: int = 0
    threads: int = dom(2, "int [1, inf)")
    max_nonfinite: int = dom(3, "int [1, inf)")
    """Consecutive non-finite updates tolerated (each is skipped) before the run stops."""
    scorer_errors: str = dom("raise", one_of(SCORER_ERRORS))
    """"raise": a scorer exception stops the run; "zero": score 0 and count it."""
    imports: list[str] = field(default_factory=list)
    """Python modules (dotted names) or .py files imported before anything is built, so that
    your own losses, estimators or controllers register themselves (docs/your-method.md)."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    kl: KLConfig = field(default_factory=KLConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    log: LogConfig = field(default_factory=LogConfig)

    @property
    def actor_critic(self) -> bool:
        """The estimator needs a critic (registry metadata `needs_critic`)."""

        return needs_critic(self.advantage.name)

    @classmethod
    def check_own_keys(cls, data: dict, own: set[str]) -> None:
        """On your own dataset, the testbed's keys must be yours (lmpo.trainer.testbed_keys)."""

        check_testbed_keys(data, own, flat_config(cls()))

    def validate(self) -> None:
        """Fail before any work: every name resolves, every number is in range."""

        validate(self)
