"""The mask-only corrections: verl's rollout rejection sampling (every level x estimator),
SkyRL's outlier-token mask and AReaL's M2PO."""

from __future__ import annotations

import math

from tests.correction_references import S, ex, reference

RS_CASES = {"token_k1": [{}, {"upper": 1.2}], "seq_mean_k1": [{}, {"lower": 0.9, "upper": 1.05}],
            "seq_max_k3": [{}, {"upper": 0.05}]}


def rejection(mode: str):
    """verl's rollout_rs: k1 = -log r in [log lower, log upper] (lower 1 / upper where it is
    None); k2 = (log r)^2 / 2 and k3 = r - 1 - log r below upper; sequence modes reduce over
    valid tokens (sum, mean with verl's + 1e-8 in the count, max)."""
    level, est = mode.rsplit("_", 1)

    def ref(lr, mask, *, upper, lower=None):
        if est == "k1" and lower is None:
            lower = 1.0 / upper
        out = []
        for row, m in zip(lr, mask, strict=True):
            c = [max(min(x, S), -S) for x in row]
            stat = {"k1": [-x for x in c], "k2": [0.5 * x * x for x in c],
                    "k3": [math.exp(x) - 1 - x for x in c]}[est]
            valid = [s for s, k in zip(stat, m, strict=True) if k]
            if level == "seq_sum":
                stat = [sum(s * k for s, k in zip(stat, m, strict=True))] * len(row)
            elif level == "seq_mean":
                stat = [sum(s * k for s, k in zip(stat, m, strict=True)) / (sum(m) + 1e-8)] \
                    * len(row)
            elif level == "seq_max":
                stat = [max(valid) if valid else 0.0] * len(row)
            keep = [math.log(lower) <= s <= math.log(upper) for s in stat] if est == "k1" \
                else [s <= upper for s in stat]
            out.append([float(k and kk) for k, kk in zip(m, keep, strict=True)])
        return None, out

    return ref


for _mode in [f"{lv}_{e}" for lv in ("token", "seq_sum", "seq_mean", "seq_max")
              for e in ("k1", "k2", "k3")]:
    if _mode != "seq_max_k1":  # verl has no max of k1 (a signed statistic)
        reference(f"rs_{_mode}", cases=RS_CASES.get(_mode, [{}]))(rejection(_mode))


@reference("outlier_token_is", cases=[{}, {"lower": 0.7, "upper": 1.5},
                                      {"lower": None, "upper": 1.3},
                                      {"lower": 0.8, "upper": None}])
def outlier_token_is(lr, mask, *, lower, upper):
    """SkyRL's compute_outlier_token_mask: a response is kept when every valid token's ratio
    (log-ratio clamped to +-20) is in [lower, upper]."""
    out = []
    for row, m in zip(lr, mask, strict=True):
        bad = any(k and ((upper is not None and ex(x) > upper) or
                         (lower is not None and ex(x) < lower))
                  for x, k in zip(row, m, strict=True))
        out.append([0.0 if bad else float(k) for k in m])
    return None, out


@reference("m2po", cases=[{"threshold": t} for t in (0.04, 0.01, 1e-6, 10.0)])
def m2po(lr, mask, *, threshold):
    """AReaL's M2PO mask: drop the largest squared log-ratios one at a time until the mean
    of the rest is below the threshold (keep at least one)."""
    tokens = sorted(((x * x, i, j) for i, (row, mrow) in enumerate(zip(lr, mask, strict=True))
                     for j, (x, m) in enumerate(zip(row, mrow, strict=True)) if m),
                    reverse=True)
    dropped = set()
    while len(tokens) - len(dropped) > 1:
        rest = [t[0] for t in tokens[len(dropped):]]
        if sum(rest) / len(rest) < threshold:
            break
        dropped.add(tokens[len(dropped)][1:])
    return None, [[float(m and (i, j) not in dropped) for j, m in enumerate(mrow)]
                  for i, mrow in enumerate(mask)]
