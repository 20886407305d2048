"""The metrics a config's run logs, known before it runs: an experiment's claims are
checked against them before the first run starts (lmpo.experiments.design.spec).

Exact names wherever a part can say them: the trainer's own row (`CORE`), the loss's
metrics (the loss called on a dummy batch), the post-update diagnostics' (the same), a
group estimator's (a fresh one on a dummy group), the objective's terms and masks. A
family pattern (fnmatch) where the names depend on data or state: per tier
(`eval/accuracy/*`), per reward function, a rollout controller's (the families of the
diagnostics it registers), a rollout correction's, a comparator's (`shadow/<name>/*`),
the bookkeeping families (`time/*`, `data/*`, `train/*`). tests/test_golden.py checks
the declaration against the rows the golden runs log, both ways.
"""

from __future__ import annotations

import fnmatch

import torch

from lmpo.advantages import advantage_meta
from lmpo.rollout import CONTROLLERS
from lmpo.trainer.parts import build_estimator, build_parts

CORE = ("step", "lr",
        "reward/accuracy", "reward/max", "reward/mean", "reward/min", "reward/std",
        "response/length_mean", "tokens/cumulative", "tokens/generated",
        "grad/norm", "grad/step_norm", "grad/clipped_frac", "optim/update_norm",
        "policy/entropy", "policy/entropy_kept", "policy/entropy_update",
        "kl/consecutive", "kl/ref", "rollout/logp_mismatch", "rollout/logp_mismatch_p99",
        "adv/abs_mean", "adv/mean", "adv/abs_max",
        "eval/accuracy_mean", "eval/reward_mean", "eval/accuracy_trained",
        "eval/accuracy_other", "eval/accuracy/*", "eval/reward/*",
        "data/*", "train/*", "time/*")
CRITIC = ("value/explained_variance", "grad/critic_norm", "value/loss", "value/clipfrac",
          "loss/term_value")
PROBE_TIER = "probe-tier"  # the dummy group's tier: its per-tier keys become patterns


def _dummy():
    g = torch.Generator().manual_seed(0)
    new = torch.randn(4, 3, generator=g, dtype=torch.float64) * 0.3 - 1.0
    old = torch.randn(4, 3, generator=g, dtype=torch.float64) * 0.3 - 1.0
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]], dtype=torch.float64)
    return new, old, adv, mask


def loss_metrics(parts) -> list[str]:
    """The loss's own metrics (`loss/...`) and the post-update diagnostics' (`diag/...`)."""
    new, old, adv, mask = _dummy()
    _, out = parts.loss_fn(new, old, adv[:, None].expand_as(new), mask)
    names = ["loss/" + k for k in out]
    for diagnostic in parts.post_update:
        names += list(diagnostic(new, old, adv, mask))
    return names


def estimator_metrics(cfg) -> list[str]:
    """A group estimator's metrics on a dummy group (a fresh estimator: the run's state is
    untouched); a critic estimator's `adv/...` and the critic's."""
    name = cfg.advantage.name
    meta = advantage_meta(name)
    if meta["needs_critic"]:
        return ["adv/*", *CRITIC]
    if meta["wants_parts"] or meta["wants_baselines"] or meta["wants_paths"]:
        return ["adv/*", "adv/zero_frac/*"]
    scores = torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    extra = {"lengths": torch.tensor([3, 4, 2, 5, 3, 3, 4, 2])} if meta["wants_lengths"] else {}
    try:
        _, out = build_estimator(cfg)(scores, groups, clusters=[PROBE_TIER] * 8, **extra)
    except (ValueError, TypeError, RuntimeError):  # an estimator that needs a larger batch
        return ["adv/*", "adv/zero_frac/*"]
    return [k.replace(PROBE_TIER, "*") for k in out] + ["adv/zero_frac", "adv/zero_frac/*"]


def declared(cfg) -> list[str]:
    """Every metric name (or fnmatch pattern) a run of `cfg` logs."""
    parts = build_parts(cfg)
    names = [*CORE, *loss_metrics(parts), *estimator_metrics(cfg),
             *(m for m in parts.objective.metrics if m != "loss/*")]
    shown = CONTROLLERS.meta(cfg.controller.name)["diagnostics"]
    names += [*shown, *(d.split("/")[0] + "/*" for d in shown)]  # and the family's others
    if {cfg.kl.schedule.name, cfg.optim.entropy_schedule.name} != {"fixed"}:
        names.append("schedule/*")  # an adaptive coefficient (lmpo.trainer.schedules)
    if cfg.loss.mask_truncated or cfg.reward.overlong.buffer_len:
        names.append("rollout/truncated_frac")  # lmpo.trainer.length
    if cfg.reward.overlong.buffer_len:
        names += ["reward/overlong_mean", "reward/overlong_frac"]
    if cfg.rollout.correction.links():
        names.append("rollout_corr/*")
    if cfg.reward.model:
        names += ["reward/rm_mean", "reward/checker_mean", "reward/rm_running_mean",
                  "reward/rm_running_std"]
    if cfg.reward.extra:
        names.append("reward/fn/*")
    if cfg.kl.ref_sync_every:
        names.append("kl/ref_syncs")
    if cfg.log.full_mismatch:
        names += ["rollout/full_tv", "rollout/full_kl"]
    if cfg.log.entropy_head_tokens:
        names.append("policy/entropy_head")
    names += [f"shadow/{name}/*" for name in cfg.log.comparators]
    return list(dict.fromkeys(names))


def logs(declared_names: list[str], metric: str) -> bool:
    """Whether `metric` is among `declared_names` (exact, or by a pattern)."""
    return any(metric == d or ("*" in d and fnmatch.fnmatchcase(metric, d))
               for d in declared_names)
