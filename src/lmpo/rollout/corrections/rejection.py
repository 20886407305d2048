"""verl's rejection modes (`rollout_rs`): masks from divergence estimates per token or
response."""

from __future__ import annotations

import math

import torch

from lmpo.rollout.corrections.base import (
    CORRECTIONS,
    SAFETY,
    Correction,
    check_band,
    finish,
    seq_mean,
    seq_sum,
)

RS_MODES = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
            "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")
# defaults where verl has none: its presets' thresholds (decoupled_seq_is_rs 0.5_2.0,
# decoupled_geo_rs 0.999_1.001, decoupled_k3_rs 0.01)
RS_DEFAULT = {"k1": (0.5, 2.0), "seq_mean_k1": (0.999, 1.001), "k2": (None, 0.01),
              "k3": (None, 0.01)}


def _divergence(log_ratio, estimator: str):
    lr = log_ratio.clamp(-SAFETY, SAFETY)
    return {"k1": -lr, "k2": 0.5 * lr ** 2, "k3": torch.exp(lr) - 1.0 - lr}[estimator]


def _seq_max(x, mask):
    m = x.masked_fill(mask <= 0, -math.inf).amax(-1)
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)


def rejection(mode: str, log_ratio, mask, lower, upper) -> Correction:
    """verl's `compute_rollout_rejection_mask` for one mode: k1 statistics (log pi_rollout /
    pi_train) must lie in [log lower, log upper], k2/k3 statistics be <= upper; sequence
    modes reject the whole response."""
    level, est = mode.rsplit("_", 1)
    stat = _divergence(log_ratio, est)
    if level != "token":
        reduce = {"seq_sum": seq_sum, "seq_mean": seq_mean, "seq_max": _seq_max}[level]
        stat = reduce(stat, mask)[:, None].expand_as(log_ratio)
    if est == "k1":
        keep = (stat >= math.log(lower)) & (stat <= math.log(upper))
    else:
        keep = stat <= upper
    return finish(None, mask, mask * keep.to(mask.dtype))


def _register_rs(mode: str) -> None:
    est = mode.rsplit("_", 1)[1]
    lower_default, upper_default = RS_DEFAULT.get(mode, RS_DEFAULT[est])
    if est == "k1":
        def fn(log_ratio, mask, *, lower: float | None = lower_default,
               upper: float = upper_default) -> Correction:
            lower = 1.0 / upper if lower is None else lower  # verl: a single value is upper
            check_band(lower, upper)
            return rejection(mode, log_ratio, mask, lower, upper)
        domains = {"lower": "(0, inf) | None", "upper": "(0, inf)"}
    else:
        def fn(log_ratio, mask, *, upper: float = upper_default) -> Correction:
            return rejection(mode, log_ratio, mask, None, upper)
        domains = {"upper": "(0, inf)"}
    fn.__name__ = f"rs_{mode}"
    CORRECTIONS.register(f"rs_{mode}", domains=domains, family="rs_<mode>",
                         per_token=mode.startswith("token"),
                         ordered=[("lower", "upper")] if est == "k1" else [],
                         title="rejection sampling", source="verl rollout_rs",
                         summary="masks tokens or responses whose divergence estimate "
                                 "(k1 in a ratio band, k2/k3 below a bound; per token, or "
                                 "a response's sum, mean or max) leaves the threshold: "
                                 + ", ".join(RS_MODES))(fn)


for _mode in RS_MODES:
    _register_rs(_mode)


@CORRECTIONS.register("outlier_token_is", domains={"lower": "(0, inf) | None",
                                                   "upper": "(0, inf) | None"},
                      ordered=[("lower", "upper")], title="outlier-token sequence mask",
                      source="SkyRL off_policy_correction.outlier_token_is_threshold_low / "
                             "_high",
                      summary="masks every response with a token whose ratio r_t is below "
                              "lower or above upper (SkyRL's suggested 1e-4 and 100)")
def outlier_token_is(log_ratio, mask, *, lower: float | None = 1e-4,
                     upper: float | None = 100.0) -> Correction:
    if lower is None and upper is None:
        raise ValueError("outlier_token_is needs lower or upper (or both)")
    check_band(lower, upper)
    r = torch.exp(log_ratio.clamp(-SAFETY, SAFETY))
    out = torch.zeros_like(mask, dtype=torch.bool)
    if upper is not None:
        out |= r > upper
    if lower is not None:
        out |= r < lower
    keep = ~(out & (mask > 0)).any(-1, keepdim=True)
    return finish(None, mask, mask * keep.to(mask.dtype))
