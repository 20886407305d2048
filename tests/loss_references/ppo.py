"""PPO-clip (asymmetric eps, dual clip), GSPO, CISPO and REINFORCE."""

from __future__ import annotations

import math

from tests.loss_references import ratio, reference


@reference("ppo_clip", cases=[{}, {"eps_low": 0.1, "eps_high": 0.28}, {"clip_ratio_c": 1.5},
                              {"delta": 1.5}, {"eps_high": 0.28, "delta": 1.3,
                                               "clip_ratio_c": 2.0}])
def ppo_clip(lp, olp, a, *, eps_low=0.2, eps_high=0.2, clip_ratio_c=None, delta=None):
    """delta (TRL's two-sided clip, INTELLECT-2): the unclipped term's ratio capped at
    delta, without gradient above it."""
    r = ratio(lp, olp)
    rc = min(max(r, 1 - eps_low), 1 + eps_high)
    capped = delta is not None and r > delta
    r1 = delta if capped else r
    unclipped, clipped = -r1 * a, -rc * a
    if unclipped >= clipped:
        value, grad = unclipped, 0.0 if capped else -r * a
    else:
        value, grad = clipped, 0.0
    if clip_ratio_c is not None and a < 0 and value > -clip_ratio_c * a:
        value, grad = -clip_ratio_c * a, 0.0
    return value, grad


@reference("cispo", cases=[{}, {"eps_low": 0.2, "eps_high": 0.28}])
def cispo(lp, olp, a, *, eps_low=1.0, eps_high=5.0):
    w = min(max(ratio(lp, olp), 1 - eps_low), 1 + eps_high)
    return -w * a * lp, -w * a


@reference("reinforce")
def reinforce(lp, olp, a):
    return -a * lp, -a


@reference("gspo", rows=True, cases=[{}, {"eps_low": 0.05, "eps_high": 0.1},
                                     {"eps_low": 0.2, "eps_high": 0.2, "clip_ratio_c": 1.05},
                                     {"eps_low": 0.01, "eps_high": 0.01, "delta": 1.02}])
def gspo_rows(lps, olps, advs, mask, *, eps_low=3e-4, eps_high=4e-4, clip_ratio_c=None,
              delta=None):
    """Per-row GSPO; returns per-token (value, grad) lists. Needs whole rows. Dual clip:
    for A < 0 a loss above -c A is -c A, without gradient. delta caps the unclipped term's
    sequence ratio (without gradient above it)."""
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
            capped = delta is not None and s > delta
            s1 = delta if capped else s
            if -s1 * a >= -sc * a:
                value, grad = -s1 * a, 0.0 if capped else -s * a
            else:
                value, grad = -sc * a, 0.0
            if clip_ratio_c is not None and a < 0 and value > -clip_ratio_c * a:
                value, grad = -clip_ratio_c * a, 0.0
            row.append((value, grad))
        out.append(row)
    return out


@reference("luspo", rows=True, cases=[{}, {"eps_low": 0.2, "eps_high": 0.28},
                                      {"eps_low": 0.01, "eps_high": 0.01, "delta": 1.02}])
def luspo_rows(lps, olps, advs, mask, *, eps_low=3e-4, eps_high=4e-4, delta=None):
    """LUSPO's per-token loss is GSPO's (it differs in the aggregation)."""
    return gspo_rows(lps, olps, advs, mask, eps_low=eps_low, eps_high=eps_high, delta=delta)


@reference("bnpo", cases=[{}, {"eps_low": 0.1, "eps_high": 0.28}, {"delta": 1.4}])
def bnpo(lp, olp, a, *, eps_low=0.2, eps_high=0.2, delta=None):
    """BNPO's per-token loss is PPO-clip's (it differs in TRL's normaliser)."""
    return ppo_clip(lp, olp, a, eps_low=eps_low, eps_high=eps_high, delta=delta)


@reference("rollout_is", cases=[{}, {"eps_low": 0.5, "eps_high": 1.0}])
def rollout_is(lp, olp, a, *, eps_low=0.2, eps_high=0.2):
    """SkyRL's rollout_is_policy_loss (GLM-5): IcePop's band with a stop-gradient weight."""
    r = ratio(lp, olp)
    w = r if 1 - eps_low < r < 1 + eps_high else 0.0
    return -w * a * lp, -w * a


@reference("reinforce_seq_is", rows=True, cases=[{}, {"threshold": 1.05}, {"threshold": 50.0}])
def reinforce_seq_is(lps, olps, advs, mask, *, threshold=2.0):
    """verl's bypass-mode REINFORCE with sequence IS: each row's weight is
    min(exp(clamp(sum of its log-ratios, -20, 20)), threshold), held fixed."""
    out = []
    for lp_row, olp_row, a_row, m_row in zip(lps, olps, advs, mask, strict=True):
        total = sum(lp - olp for lp, olp, m in zip(lp_row, olp_row, m_row, strict=True) if m)
        w = min(math.exp(max(-20.0, min(20.0, total))), threshold)
        out.append([(-w * a * lp, -w * a) if m else (0.0, 0.0)
                    for lp, a, m in zip(lp_row, a_row, m_row, strict=True)])
    return out
