"""What a run needs besides its checkpointed state: device, prompt encoder, stop tokens,
reward function, the model that samples (the policy, or its low-precision or stale copy:
`lmpo.rollout.precision`) and the batch filter."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from lmpo.models import PromptEncoder, stop_token_ids
from lmpo.models.adapters import AdaptersOff, apply_lora
from lmpo.reward_model_training import resolve_reward_model
from lmpo.rewards import Reward, build_reward
from lmpo.rewards.multi import MultiReward
from lmpo.rewards.reward_model import ModelReward
from lmpo.rollout.precision import RolloutModel
from lmpo.trainer.advantage import wants_paths
from lmpo.trainer.filters import build_filter
from lmpo.trainer.greedy import wants_greedy


def adamw(params, **kwargs) -> torch.optim.AdamW:
    """AdamW over `params`, fused (one kernel per step instead of torch's multi-tensor loop)
    where torch has a fused kernel for their device (CPU and CUDA): the same update up to
    float rounding, ~5x faster on SmolLM2-135M's 135M parameters on a 2-core CPU
    (benchmarks/real_step.py)."""
    params = list(params)
    fused = bool(params) and all(p.device.type in ("cpu", "cuda") and p.is_floating_point()
                                 for p in params)
    return torch.optim.AdamW(params, fused=fused, **kwargs)


def enable_checkpointing(model) -> None:
    """Recompute activations in the backward pass (transformers 5 renamed the switch)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def prepare_policy(policy, cfg):
    """(policy, reference): gradient checkpointing and LoRA adapters as configured; the
    reference is a frozen copy, or with LoRA the policy with its adapters switched off."""
    if cfg.optim.gradient_checkpointing:
        enable_checkpointing(policy)
    if cfg.lora.r > 0:

        policy = apply_lora(policy, r=cfg.lora.r, alpha=cfg.lora.alpha,
                            dropout=cfg.lora.dropout, target_modules=cfg.lora.target_modules)
        return policy, AdaptersOff(policy)
    return policy, copy.deepcopy(policy).eval().requires_grad_(False)


@dataclass
class Runtime:
    tokenizer: object
    encode: PromptEncoder
    stop_ids: list[int]
    reward: Reward
    device: torch.device
    rollout_model: RolloutModel
    filter: object  # which samples enter the update (lmpo.trainer.filters)
    greedy_baselines: bool = False  # decode a greedy response per prompt (lmpo.trainer.greedy)
    path_stats: bool = False  # the policy's per-token path statistics (TrainBatch.paths)

    @classmethod
    def build(cls, cfg, policy, tokenizer, task, *, progress: bool = True) -> Runtime:
        device = next(policy.parameters()).device
        limit = cfg.reward.timeout_s
        reward = build_reward(cfg.reward.fn, task, cfg.reward.scale, limit)
        if cfg.reward.extra:  # several functions: a weighted sum, each logged

            reward = MultiReward([reward] + [build_reward(f, task, timeout_s=limit)
                                             for f in cfg.reward.extra],
                                 cfg.reward.weights or [1.0] * (1 + len(cfg.reward.extra)))
        if cfg.reward.model is not None:  # the checker stays: accuracy, reward/checker_mean

            reward = ModelReward(resolve_reward_model(cfg.reward.model, progress=progress),
                                 reward, micro_batch_size=cfg.reward.micro_batch_size,
                                 normalize=cfg.reward.normalize, device=device)
        return cls(tokenizer=tokenizer,
                   encode=PromptEncoder(tokenizer, cfg.prompt_format, cfg.system_prompt),
                   stop_ids=stop_token_ids(policy, tokenizer), reward=reward, device=device,
                   rollout_model=RolloutModel(policy, cfg.rollout.dtype,
                                              fp8_activations=cfg.rollout.fp8_activations,
                                              staleness=cfg.rollout.staleness,
                                              bf16_boundary=cfg.rollout.bf16_boundary),
                   filter=build_filter(cfg.rollout, tokenizer.pad_token_id),
                   greedy_baselines=wants_greedy(cfg), path_stats=wants_paths(cfg))
