"""Rollout corrections (`rollout.correction: {kind, hparams}`): importance weights and
rejection masks for the mismatch between the policy that sampled and the float32 policy
the update starts from, applicable to any loss.

Every kind reads one quantity, the log-ratio of the float32 recompute to the behaviour
log-probs, `log_ratio = log pi_train - log pi_rollout` [B, T] (the correction runs that
recompute itself, whatever `rollout.old_logp` says), and returns a `Correction`:

- `weights` [B, T] (or None): multiply each token's loss before aggregation, as verl
  multiplies its policy losses by `rollout_is_weights`;
- `mask` [B, T]: the response mask the update uses (verl's rejection sampling rewrites
  `response_mask`: rejected tokens leave the loss and its token counts);
- `metrics`: `rollout_corr/weight_mean|_min|_max` (over the response tokens), the share
  of tokens the correction removes (`masked_frac`: weight 0 or rejected) and the share of
  responses it touches so (`seq_masked_frac`).

Kinds, each equal to its source's code (tests/test_corrections.py, and against verl 0.9.1
itself in tests/test_verl.py):

| kind | weight | source |
|---|---|---|
| tis | min(r_t, upper) (`lower`: clamp(r_t, lower, upper)) | verl `rollout_is: token` |
| seq_tis | min(prod_t r_t, upper), per sequence (`lower` too) | verl `rollout_is: sequence` |
| icepop | r_t where lower <= r_t <= upper, else 0 | verl `rollout_is_threshold: lower_upper` |
| mis | r where r <= upper (and >= lower), else 0; per token or sequence | TRL `*_mask` |
| seq_mask_tis | r_t * 1[lower <= exp(mean_t log r_t) <= upper] | OpenRLHF `seq-mask-tis` |
| rs_<mode> | none: a rejection mask (verl's `rollout_rs` mode) | verl `rollout_rs` |
| m2po | none: masks the largest squared log-ratios (rest's mean < threshold) | AReaL |
| outlier_token_is | none: masks a response with any r_t outside [lower, upper] | SkyRL |

With `lower`, tis and seq_tis are TRL's two-sided `token_truncate` / `sequence_truncate`;
outlier_token_is is SkyRL's `outlier_token_is_threshold_low/high`. A list of kinds is a
chain (`chain.py`): masks multiplied, at most one weight.

r_t = exp(clamp(log_ratio_t, -20, 20)) (verl's safety bound, applied to every kind).

Every module in this package is imported here, so a new correction is one file with its
`@CORRECTIONS.register(...)` line (docs/your-method.md).
"""

import importlib
import pkgutil

from lmpo.rollout.corrections.base import (
    CORRECTIONS,
    SAFETY,
    Correction,
    acts_per_token,
    correction_hparams,
    get_correction,
    list_corrections,
)

for _module in pkgutil.iter_modules(__path__):  # every correction file registers itself
    importlib.import_module(f"{__name__}.{_module.name}")

from lmpo.rollout.corrections.rejection import RS_MODES  # noqa: E402

__all__ = ["CORRECTIONS", "RS_MODES", "SAFETY", "Correction", "acts_per_token",
           "correction_hparams", "get_correction", "list_corrections"]
