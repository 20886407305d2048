"""lmpo inside TRL: a `GRPOTrainer` that takes any lmpo loss and advantage estimator.

    from lmpo.integrations.trl import LmpoGRPOTrainer
    trainer = LmpoGRPOTrainer(model=model, reward_funcs=reward, args=GRPOConfig(...),
                              train_dataset=ds, processing_class=tok,
                              lmpo_loss="cegppo", lmpo_loss_hparams={"beta1": 0.5},
                              lmpo_advantage="ebpo", ref_model=frozen_copy)

The rollout, reward functions, reference log-probs, optimiser and logging stay
TRL's; lmpo replaces the two method-specific steps: the advantage (from the
rewards TRL computed) and the per-token loss with its aggregation. TRL's
`beta` still adds its k3 KL term, times the importance ratio when
`use_bias_correction_kl` (TRL's default) asks. Metrics are logged through TRL's logger as
`lmpo/<key>`. See docs/trl.md.
"""

from __future__ import annotations

import torch
from trl import GRPOTrainer

from lmpo.advantages import advantage_meta, estimator_peer_hparams, get_advantage
from lmpo.losses import (
    AGG_MODES,
    aggregate,
    default_aggregation,
    get_loss,
    kl_penalty,
    loss_meta,
    off_policy_sequence_mask,
    peer_hparams,
)


class LmpoGRPOTrainer(GRPOTrainer):
    def __init__(self, *args, lmpo_loss: str = "ppo_clip", lmpo_loss_hparams: dict | None = None,
                 lmpo_agg: str | None = None, lmpo_advantage: str | None = None,
                 lmpo_advantage_hparams: dict | None = None, ref_model=None, **kwargs):
        args_ = kwargs.get("args") if "args" in kwargs else (args[2] if len(args) > 2 else None)
        # GRPOConfig's settings the loss declares (e.g. epsilon / epsilon_high for a PPO clip)
        # under explicit lmpo_loss_hparams
        hparams = peer_hparams(lmpo_loss, "trl", lambda key: getattr(args_, key, None)) \
            | dict(lmpo_loss_hparams or {})
        self.lmpo_loss_fn = get_loss(lmpo_loss, **hparams)
        self.lmpo_loss = lmpo_loss
        self.lmpo_loss_hparams = hparams
        lmpo_agg = lmpo_agg or default_aggregation(lmpo_loss)  # the method's own, by default
        if lmpo_agg not in AGG_MODES:
            raise ValueError(f"unknown lmpo_agg {lmpo_agg!r}; valid modes: {', '.join(AGG_MODES)}")
        self.lmpo_agg = lmpo_agg
        # GRPOConfig's settings the estimator declares (grpo's scale: scale_rewards) under
        # explicit lmpo_advantage_hparams
        adv_hparams = (estimator_peer_hparams(lmpo_advantage, "trl",
                                              lambda key: getattr(args_, key, None))
                       | dict(lmpo_advantage_hparams or {})) if lmpo_advantage else {}
        self.lmpo_estimator = (get_advantage(lmpo_advantage, **adv_hparams)
                               if lmpo_advantage else None)
        meta = advantage_meta(lmpo_advantage) if lmpo_advantage else {}
        self._lmpo_wants_lengths = meta.get("wants_lengths", False)
        self._lmpo_wants_parts = meta.get("wants_parts", False)
        if lmpo_advantage and not self._lmpo_wants_parts and \
                getattr(args_, "multi_objective_aggregation", None) == "normalize_then_sum":
            raise ValueError(f"GRPOConfig(multi_objective_aggregation='normalize_then_sum') "
                             f"normalises each reward function on its own, which lmpo_advantage="
                             f"{lmpo_advantage!r} would replace by one normalisation of their "
                             "sum: use lmpo_advantage='gdpo' (the same estimator) or TRL's "
                             "default 'sum_then_normalize'")
        self._lmpo_rewards = None
        beta = getattr(args_, "beta", 0.0)
        if ref_model is not None and args_ is not None:
            args_.beta = 0.0  # TRL would rebuild the reference from a hub id; we bring our own
        super().__init__(*args, **kwargs)
        if ref_model is not None:
            from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

            if args_ is not None:
                args_.beta = beta
            self.beta = beta
            ref_model.eval().requires_grad_(False)
            disable_dropout_in_model(ref_model)
            add_fused_lm_head(ref_model, temperature=self.temperature,
                              cast_lm_head_to_fp32=self.args.cast_lm_head_to_fp32)
            self.ref_model = self.accelerator.prepare_model(ref_model, evaluation_mode=True)

    # ------------------------------------------------------------ advantages
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions,
                                                      completion_ids_list)
        self._lmpo_rewards = rewards_per_func
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        if self.lmpo_estimator is None or self._lmpo_rewards is None:
            return output
        per_func = self._lmpo_rewards
        weights = self.reward_weights.to(per_func.device)
        rewards = (per_func * weights[None]).nansum(dim=1).float().cpu()
        mode = "train" if self.model.training else "eval"
        group = self.num_generations if mode == "train" else self.num_generations_eval
        group_ids = torch.arange(len(rewards)) // group
        extra = {}
        if self._lmpo_wants_lengths:  # response lengths of every sample the rewards cover
            if self.accelerator.num_processes > 1:
                raise ValueError("an lmpo estimator that needs response lengths (OPO, "
                                 "REINFORCE++) runs in one TRL process only")
            extra["lengths"] = output["completion_mask"].sum(-1).double().cpu()
        if self._lmpo_wants_parts:  # GDPO: every reward function's scores and weight
            extra |= {"parts": per_func.double().cpu(), "weights": weights.double().cpu()}
        adv, metrics = self.lmpo_estimator(rewards, group_ids, **extra)
        n_local = len(output["advantages"])
        start = self.accelerator.process_index * n_local
        output["advantages"] = adv[start:start + n_local].to(output["advantages"])
        for key, value in metrics.items():
            self._metrics[mode][f"lmpo/{key}"].append(value)
        return output

    # ------------------------------------------------------------ loss
    def _importance_weights(self, logp, old, mask):
        """TRL's coef_1, exp(logp - old) per token or of its per-sequence mean
        (`importance_sampling_level`), differentiable: the ratio its bias-corrected KL
        (`use_bias_correction_kl`) multiplies the k3 term by."""
        log_ratio = logp - old
        if getattr(self.args, "importance_sampling_level", "token") == "sequence":
            m = mask.to(log_ratio.dtype)
            log_ratio = ((log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0))[:, None]
        return torch.exp(log_ratio)

    def _compute_loss(self, model, inputs):
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        logp, entropies, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True)
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        loss_tok, metrics = self.lmpo_loss_fn(logp, old, inputs["advantages"], mask)
        threshold = getattr(self.args, "off_policy_mask_threshold", None)
        if threshold is not None:  # OPSM against the sampler's log-probs, as TRL
            sampler = inputs.get("sampling_per_token_logps", old)
            keep, mask_metrics = off_policy_sequence_mask(logp, sampler, inputs["advantages"],
                                                          mask, threshold)
            loss_tok, metrics = loss_tok * keep, metrics | mask_metrics
        if self.top_entropy_quantile < 1.0:  # TRL's own selection, per micro-batch
            keep = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
            loss_tok = loss_tok * keep
        if self.beta != 0.0:
            kl = kl_penalty(logp, inputs["ref_per_token_logps"], "k3")
            if getattr(self.args, "use_bias_correction_kl", False):  # TRL's default: True
                kl = kl * self._importance_weights(logp, old, mask)
            loss_tok = loss_tok + self.beta * kl
        mode = "train" if self.model.training else "eval"
        accum = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.lmpo_agg == "token-mean" and loss_meta(self.lmpo_loss)["batch_token_mean"]:
            loss = aggregate(loss_tok, mask, "token-mean") / accum  # TRL's "bnpo"
        elif self.lmpo_agg in ("token-mean", "token-sum"):
            # TRL's "dapo" normaliser: tokens of the whole generation batch, per accumulation window
            tokens = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                tokens = tokens * accum / self.args.steps_per_generation
            loss = aggregate(loss_tok, mask, "token-mean", num_tokens=tokens) \
                if self.lmpo_agg == "token-mean" else aggregate(loss_tok, mask, "token-sum")
        else:
            loss = aggregate(loss_tok, mask, self.lmpo_agg,
                             horizon=self.max_completion_length) / accum
        for key, value in metrics.items():
            self._metrics[mode][f"lmpo/{key}"].append(value)
        m = mask.bool()
        self._metrics[mode]["entropy"].append(float(entropies[m].detach().mean()) if m.any()
                                              else 0.0)
        return loss
