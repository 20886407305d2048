"""The cross-cutting options: settings that act on any loss, estimator or rollout (a mask,
a weight, a schedule, a precision), each under lmpo's key with the names papers and
engines give it, so that `lmpo methods` finds "OPSM" or "mask_truncated_completions" as
well as `loss.off_policy_mask_threshold`. `lmpo methods` prints this table after the
methods table, and docs/methods-reference.md holds both (a test checks every key is a
config key, and that the page is current)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Option:
    key: str  # the config key (dotted), as in a YAML file or an override
    names: str  # what papers call it
    engines: str  # the engines' spelling
    summary: str


OPTIONS = (
    Option("loss.off_policy_mask_threshold", "OPSM, off-policy sequence mask (DeepSeek-V3.2)",
           "TRL `off_policy_mask_threshold`; slime `--use-opsm`",
           "drops negative-advantage responses whose KL to the rollout policy exceeds the "
           "threshold, for any loss"),
    Option("loss.seq_divergence_threshold",
           "VACO, sequence mask on binary divergence (arXiv 2603.01365)",
           "open-instruct `rho_divergence_algo: vaco` (#1755)",
           "drops the tokens of a response whose mean binary TV (or KL) between pi_old and the "
           "sampler exceeds the threshold that move away from the sampler, for any loss"),
    Option("loss.centered_score", "score centering (arXiv 2609.20807)",
           "SkyRL `trainer.algorithm.score_centering` (#2244); miles #3317",
           "subtracts the sampler's expected score (whole vocabulary, or its top k with the "
           "tail spread in proportion to pi) from a score-function loss at every prefix"),
    Option("loss.top_entropy_quantile", "the 80/20 rule (Beyond the 80/20 Rule)",
           "TRL `top_entropy_quantile`",
           "trains only on the minibatch's highest-entropy tokens (q = 0.2 in the paper)"),
    Option("loss.hparams.clip_ratio_c", "dual clip (Dual-Clip PPO)",
           "verl `clip_ratio_c`", "bounds the loss of negative-advantage tokens at c * A"),
    Option("loss.hparams.delta", "two-sided clip (INTELLECT-2)", "TRL `delta`",
           "caps the ratio of positive-advantage tokens at delta too"),
    Option("loss.nll_coef", "NLL on correct responses (CE-GPPO's scripts)", "-",
           "adds c x the NLL of correct responses to any loss"),
    Option("loss.mask_truncated", "masking truncated completions (DAPO's overlong filter)",
           "TRL `mask_truncated_completions`",
           "responses that hit the budget without ending leave the loss"),
    Option("loss.agg", "loss aggregation: token-mean (DAPO), seq-mean-token-mean (GRPO), "
           "seq-mean-token-sum-norm (Dr. GRPO), prompt-mean (ScaleRL)",
           "verl `loss_agg_mode`; TRL `loss_type`; SkyRL `loss_reduction`",
           "how per-token losses become the minibatch's loss"),
    Option("kl.kind", "KL estimators k1, k2, k3; straight-through k1+, k3+, abs+",
           "verl `kl_penalty` / `kl_loss_type` (`kl`, `mse`, `low_var_kl`, `abs`, `+`)",
           "the estimate of KL(pi || ref) per token"),
    Option("kl.mode", "KL in the loss or in the reward", "verl `use_kl_loss` / "
           "`use_kl_in_reward`", "a KL loss term, or coef x k1 taken from token rewards"),
    Option("kl.bias_correction", "unbiased KL estimate (DeepSeek-V3.2)",
           "TRL `use_bias_correction_kl`", "weights the KL term by the ratio pi / pi_old"),
    Option("kl.schedule", "adaptive KL coefficient (Ziegler et al.)",
           "verl `algorithm.kl_ctrl.type: adaptive`; OpenRLHF `--algo.kl.target`",
           "moves the KL coefficient toward a target KL"),
    Option("optim.entropy_coef", "entropy bonus", "verl `entropy_coeff`; TRL `entropy_coef`",
           "adds -c x entropy to the loss"),
    Option("optim.entropy_schedule", "adaptive entropy control (Skywork-OR1)",
           "TRL `use_adaptive_entropy`", "moves the entropy bonus toward a target entropy"),
    Option("rollout.correction", "TIS, IcePop, MIS, rejection sampling, M2PO (mismatch "
           "corrections)", "verl `rollout_is` / `rollout_rs`; TRL "
           "`vllm_importance_sampling_*`; SkyRL `off_policy_correction`; OpenRLHF "
           "`vllm_is_correction_type`", "weights or masks tokens by their train / rollout "
           "log-ratio; a list chains several"),
    Option("rollout.old_logp", "bypass mode (the rollout policy as pi_old)",
           "verl `bypass_mode`", "anchors the ratio on the sampler's log-probs or a "
           "float32 recompute"),
    Option("rollout.dynamic_sampling", "dynamic sampling (DAPO)", "verl DAPO recipe "
           "`filter_groups`; SkyRL `zero_variance_filter`",
           "drops groups whose rewards are all equal"),
    Option("rollout.max_gen_batches", "refill to a full batch (DAPO)",
           "verl DAPO recipe `filter_groups.max_num_gen_batches`",
           "generation rounds per step to refill dropped groups"),
    Option("rollout.dtype", "FP8 / FP4 (NVFP4) / MXFP8 / bf16 rollouts (training-inference "
           "mismatch)", "the inference engine's precision; MXFP8: verl #7519",
           "samples from a low-precision copy of the policy"),
    Option("rollout.bf16_boundary", "boundary layers in bf16 (NVFP4 recipes)",
           "verl #7971, NeMo-RL #3566", "keeps the first and last layers and the LM head out "
           "of FP4 / FP8"),
    Option("kl.ref_sync_every", "reference sync / soft update (TR-DPO)",
           "TRL `sync_ref_model`, `ref_model_sync_steps`, `ref_model_mixup_alpha`",
           "moves the KL's reference toward the policy every N steps; checkpointed"),
    Option("log.full_mismatch", "vocabulary-wide training-inference mismatch",
           "SkyRL #2201", "logs the TV and KL between the sampler's and the policy's whole "
           "next-token distributions at the sampled positions"),
    Option("rollout.staleness", "stale (asynchronous) rollouts", "the asynchronous "
           "engines' off-policy lag (AReaL, prime-rl, NeMo-RL)",
           "samples with the policy of k steps back"),
    Option("optim.dtype", "bf16 mixed-precision update", "verl's FSDP mixed precision; TRL "
           "`bf16`", "the update's matrix products in bfloat16"),
    Option("reward.overlong", "soft overlong punishment (DAPO)", "verl DAPO reward manager "
           "`overlong_buffer`; OpenRLHF `overlong_buffer_len`", "penalises responses "
           "that run into the last buffer_len tokens of the budget"),
    Option("reward.scale", "{-1, +1} rewards", "CE-GPPO's and DPPO's scripts",
           "maps {0, 1} scores to {-1, +1}"),
    Option("reward.extra", "several reward functions", "TRL `reward_funcs` + "
           "`reward_weights`", "sums further reward functions with the checker"),
    Option("advantage.hparams.scale", "reward scaling of the group advantage (Dr. GRPO's "
           "no-std)", "TRL `scale_rewards`", "divides by the group's std, the batch's, "
           "or not at all"),
    Option("critic.init", "a critic from scratch or from zero", "-",
           "the value head's initial weights"),
)


def markdown() -> str:
    lines = ["| option | also called | in the engines | what it does |", "|---|---|---|---|"]
    lines += [f"| `{o.key}` | {o.names} | {o.engines} | {o.summary} |" for o in OPTIONS]
    return "\n".join(lines)


def find(text: str) -> list[Option]:
    """The options whose key, names or engine spelling contain `text` (any case)."""
    t = text.lower()
    return [o for o in OPTIONS if t in f"{o.key} {o.names} {o.engines}".lower()]
