"""What `lmpo compare --engine trl` can run and how TRL's log reads as lmpo's rows: the
pure pieces of `lmpo.integrations.trl_run` (no TRL import), shared with the sweep's
planning and `lmpo report`."""

from __future__ import annotations

from lmpo.advantages import advantage_meta
from lmpo.losses import default_aggregation

RENAME = {"reward": "reward/mean", "entropy": "policy/entropy", "grad_norm": "grad/norm",
          "kl": "kl/ref", "num_tokens": "tokens/cumulative",
          "completions/mean_length": "rollout/length_mean"}


def trl_refusals(cfg) -> list[str]:
    """The settings of `cfg` GRPOTrainer cannot express, each named."""
    r = cfg.rollout
    checks = [
        (cfg.actor_critic, f"advantage.name={cfg.advantage.name}",
         "TRL's GRPOTrainer has no critic"),
        (advantage_meta(cfg.advantage.name)["wants_paths"], f"advantage.name={cfg.advantage.name}",
         "TRL's trainer computes no per-token sum_v pi_v^2 for it"),
        (advantage_meta(cfg.advantage.name)["wants_baselines"],
         f"advantage.name={cfg.advantage.name}", "TRL's trainer decodes no greedy baselines"),
        (cfg.controller.name != "none", f"controller.name={cfg.controller.name}",
         "TRL's generation has no per-token stopping controller"),
        (r.sampler != "shuffled", f"rollout.sampler={r.sampler}", "TRL's sampler shuffles"),
        (r.dynamic_sampling, "rollout.dynamic_sampling=True", "TRL has no group filter"),
        (r.dtype != "float32", f"rollout.dtype={r.dtype}", "lmpo's simulated sampler"),
        (r.staleness > 0, f"rollout.staleness={r.staleness}", "TRL samples on-policy"),
        (bool(r.correction.links()), f"rollout.correction={r.correction.links()}",
         "TRL's correction is vLLM's importance sampling"),
        (cfg.reward.model is not None, f"reward.model={cfg.reward.model}",
         "an lmpo reward model is not a TRL reward function"),
        (cfg.kl.coef > 0 and (cfg.kl.mode, cfg.kl.kind) != ("loss", "k3"),
         f"kl.mode={cfg.kl.mode}, kl.kind={cfg.kl.kind}", "TRL's beta is a k3 loss term"),
        (cfg.loss.nll_coef != 0, f"loss.nll_coef={cfg.loss.nll_coef}",
         "TRL's loss has no NLL term"),
        (cfg.loss.seq_divergence_threshold is not None,
         f"loss.seq_divergence_threshold={cfg.loss.seq_divergence_threshold}",
         "TRL has no VACO sequence mask (open-instruct's)"),
        (cfg.loss.centered_score is not None,
         f"loss.centered_score={cfg.loss.centered_score}",
         "TRL has no score centering (SkyRL #2244 and miles #3317 are open PRs)"),
        (cfg.lora.r > 0, f"lora.r={cfg.lora.r}", "pass a PEFT model to TRL yourself"),
        (cfg.reward.overlong.buffer_len > 0, "reward.overlong",
         "TRL has no overlong penalty (write it as a reward function)"),
        (cfg.loss.agg == "prompt-mean", "loss.agg=prompt-mean",
         "TRL's loss types have no prompt-level mean"),
        (cfg.kl.schedule.name != "fixed", f"kl.schedule={cfg.kl.schedule.name}",
         "TRL's beta is fixed"),
        ((cfg.optim.entropy_coef or cfg.optim.entropy_schedule.name != "fixed")
         and (cfg.loss.agg or default_aggregation(cfg.loss.name)) != "token-mean",
         f"optim.entropy_coef with loss.agg={cfg.loss.agg or default_aggregation(cfg.loss.name)}",
         "TRL's entropy bonus is a token mean whatever the loss's aggregation"),
        (r.batch_size % cfg.optim.minibatches != 0, f"optim.minibatches={cfg.optim.minibatches}",
         "the batch does not split into that many minibatches"),
    ]
    return [f"{name}: {why}" for bad, name, why in checks if bad]


def lmpo_row(log: dict, step: int) -> dict:
    row = {"step": step}
    for key, value in log.items():
        if not isinstance(value, int | float):
            continue
        if key in RENAME:
            row[RENAME[key]] = float(value)
        elif key.startswith("lmpo/"):
            name = key.removeprefix("lmpo/")
            row[name if name.startswith("adv/") else f"loss/{name}"] = float(value)
        else:
            row[f"trl/{key}"] = float(value)
    return row
