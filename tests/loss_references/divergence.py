"""DPPO (binary TV and binary KL masks) and DRPO (the smooth quadratic penalty)."""

from __future__ import annotations

import math

from tests.loss_references import ratio, reference


@reference("dppo_tv", cases=[{}, {"delta_low": 0.05, "delta_high": 0.02, "clip_ratio_c": 1.2}])
def dppo_tv(lp, olp, a, *, delta_low=0.15, delta_high=0.15, clip_ratio_c=3.0):
    p, q = math.exp(lp), math.exp(olp)
    drop = (a > 0 and p - q > delta_high) or (a <= 0 and p - q < -delta_low)
    if drop:
        return 0.0, 0.0
    w = min(ratio(lp, olp), clip_ratio_c)
    return -a * w * lp, -a * w


@reference("dppo_kl", cases=[{}, {"delta": 0.005, "clip_ratio_c": 1.1},
                             {"delta": 9.0, "delta_low": 0.002, "delta_high": 0.03}])
def dppo_kl(lp, olp, a, *, delta=0.05, clip_ratio_c=3.0, delta_low=None, delta_high=None):
    p, q = math.exp(lp), math.exp(olp)
    d = q * (olp - lp) + (1 - q) * math.log((1 - q + 1e-8) / (1 - p + 1e-8))
    bound = (delta_high if a > 0 else delta_low)
    bound = delta if bound is None else bound
    drop = d > bound and ((a > 0 and p > q) or (a <= 0 and p < q))
    if drop:
        return 0.0, 0.0
    w = min(ratio(lp, olp), clip_ratio_c)
    return -a * w * lp, -a * w


@reference("drpo", cases=[{}, {"delta": 0.05}])
def drpo(lp, olp, a, *, delta=12.5):
    r, q = ratio(lp, olp), math.exp(olp)
    value = -r * a + abs(a) * q * (r - 1) ** 2 / (2 * delta)
    grad = -a * r + abs(a) * q * (r - 1) * r / delta
    return value, grad


@reference("spo", cases=[{}, {"eps": 0.05}])
def spo(lp, olp, a, *, eps=0.2):
    r = ratio(lp, olp)
    return -r * a + abs(a) * (r - 1) ** 2 / (2 * eps), -a * r + abs(a) * (r - 1) * r / eps

