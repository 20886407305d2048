"""Independent float64 references for every registered loss.

Written element by element with the `math` module from the formulas in the
method spec, sharing no code with `lmpo.losses`. Each entry gives the per-token
loss and its closed-form derivative with respect to logp (for valid tokens).
"""

from __future__ import annotations

import math


def _r(lp, olp):
    return math.exp(max(-20.0, min(20.0, lp - olp)))


def ppo_clip(lp, olp, a, *, eps_low=0.2, eps_high=0.2, clip_ratio_c=None):
    r = _r(lp, olp)
    rc = min(max(r, 1 - eps_low), 1 + eps_high)
    unclipped, clipped = -r * a, -rc * a
    if unclipped >= clipped:
        value, grad = unclipped, -r * a
    else:
        value, grad = clipped, 0.0
    if clip_ratio_c is not None and a < 0 and value > -clip_ratio_c * a:
        value, grad = -clip_ratio_c * a, 0.0
    return value, grad


def cispo(lp, olp, a, *, eps_low=1.0, eps_high=5.0):
    w = min(max(_r(lp, olp), 1 - eps_low), 1 + eps_high)
    return -w * a * lp, -w * a


def reinforce(lp, olp, a):
    return -a * lp, -a


def output_reset(lp, olp, a, *, alpha=0.2, weight="sign"):
    if a == 0:
        return 0.0, 0.0
    rho = max(-20.0, min(20.0, lp - olp))
    s = 1.0 if a > 0 else -1.0
    h = max(0.0, alpha - s * rho)
    k = abs(a) if weight == "abs" else 1.0
    return k * h * h, -2.0 * k * s * h


def cegppo(lp, olp, a, *, eps_low=0.2, eps_high=0.2, beta1=0.5, beta2=1.0, clip_ratio_c=None):
    r = _r(lp, olp)
    if r < 1 - eps_low and a < 0:
        value, grad = -beta1 * (1 - eps_low) * a, -beta1 * (1 - eps_low) * a
    elif r > 1 + eps_high and a > 0:
        value, grad = -beta2 * (1 + eps_high) * a, -beta2 * (1 + eps_high) * a
    else:
        value, grad = -r * a, -r * a
    if clip_ratio_c is not None and a < 0 and r > clip_ratio_c:
        value, grad = -clip_ratio_c * a, 0.0
    return value, grad


def dppo_tv(lp, olp, a, *, delta_low=0.15, delta_high=0.15, clip_ratio_c=3.0):
    p, q = math.exp(lp), math.exp(olp)
    drop = (a > 0 and p - q > delta_high) or (a <= 0 and p - q < -delta_low)
    if drop:
        return 0.0, 0.0
    w = min(_r(lp, olp), clip_ratio_c)
    return -a * w * lp, -a * w


def dppo_kl(lp, olp, a, *, delta=0.05, clip_ratio_c=3.0):
    p, q = math.exp(lp), math.exp(olp)
    d = q * (olp - lp) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
    drop = d > delta and ((a > 0 and p > q) or (a <= 0 and p < q))
    if drop:
        return 0.0, 0.0
    w = min(_r(lp, olp), clip_ratio_c)
    return -a * w * lp, -a * w


def drpo(lp, olp, a, *, delta=12.5):
    r, q = _r(lp, olp), math.exp(olp)
    value = -r * a + abs(a) * q * (r - 1) ** 2 / (2 * delta)
    grad = -a * r + abs(a) * q * (r - 1) * r / delta
    return value, grad


def gspo_rows(lps, olps, advs, mask, *, eps_low=3e-4, eps_high=4e-4):
    """Per-row GSPO; returns per-token (value, grad) lists. Needs whole rows."""
    out = []
    for lp_row, olp_row, a_row, m_row in zip(lps, olps, advs, mask, strict=True):
        n = sum(m_row)
        mean_rho = sum((lp - olp) for lp, olp, m in zip(lp_row, olp_row, m_row, strict=True)
                       if m) / max(n, 1)
        s = math.exp(min(mean_rho, 10.0))
        row = []
        for a, m in zip(a_row, m_row, strict=True):
            if not m:
                row.append((0.0, 0.0))
                continue
            sc = min(max(s, 1 - eps_low), 1 + eps_high)
            if -s * a >= -sc * a:
                row.append((-s * a, -s * a))
            else:
                row.append((-sc * a, 0.0))
        out.append(row)
    return out


TOKEN_REFERENCES = {
    "ppo_clip": ppo_clip, "cispo": cispo, "reinforce": reinforce,
    "output_reset": output_reset, "cegppo": cegppo, "dppo_tv": dppo_tv,
    "dppo_kl": dppo_kl, "drpo": drpo,
}
ROW_REFERENCES = {"gspo": gspo_rows}
