"""CE-GPPO: PPO-clip's value with a beta-scaled gradient through the clipped tokens."""

from __future__ import annotations

from tests.loss_references import ratio, reference


@reference("cegppo", cases=[{}, {"beta1": 0.0, "beta2": 0.0},
                            {"beta1": 2.0, "beta2": 0.3, "eps_low": 0.1, "eps_high": 0.3,
                             "clip_ratio_c": 1.6}])
def cegppo(lp, olp, a, *, eps_low=0.2, eps_high=0.2, beta1=0.5, beta2=1.0, clip_ratio_c=None):
    r = ratio(lp, olp)
    if r < 1 - eps_low and a < 0:
        value, grad = -beta1 * (1 - eps_low) * a, -beta1 * (1 - eps_low) * a
    elif r > 1 + eps_high and a > 0:
        value, grad = -beta2 * (1 + eps_high) * a, -beta2 * (1 + eps_high) * a
    else:
        value, grad = -r * a, -r * a
    if clip_ratio_c is not None and a < 0 and r > clip_ratio_c:
        value, grad = -clip_ratio_c * a, 0.0
    return value, grad
