"""The engines' losses lmpo also ships: SAPO, GPG, DRO, GMPO (geo_mean), Clip-Cov, KL-Cov.

Each returns the per-token value and d(sum of all token losses)/d logp_t (for the
sequence- and batch-level ones, through the shared quantities)."""

from __future__ import annotations

import math

from tests.loss_references import ratio, reference


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


@reference("sapo", cases=[{}, {"tau_pos": 2.0, "tau_neg": 4.0}])
def sapo(lp, olp, a, *, tau_pos=1.0, tau_neg=1.05):
    r = ratio(lp, olp)
    tau = tau_pos if a > 0 else tau_neg
    s = sigmoid(tau * (r - 1.0))
    return -a * s * 4.0 / tau, -a * 4.0 * s * (1.0 - s) * r


@reference("gpg")
def gpg(lp, olp, a):
    return -a * lp, -a


@reference("dro", cases=[{}, {"beta": 0.7}])
def dro(lp, olp, a, *, beta=0.05):
    rho = max(-20.0, min(20.0, lp - olp))
    inside = -20.0 < lp - olp < 20.0
    return -(a * lp - 0.5 * beta * rho * rho), -a + (beta * rho if inside else 0.0)


@reference("geo_mean", rows=True, cases=[{}, {"eps_low": 0.05, "eps_high": 0.3}])
def geo_mean(lps, olps, advs, mask, *, eps_low=0.2, eps_high=0.2):
    out = []
    for lp_row, olp_row, a_row, m_row in zip(lps, olps, advs, mask, strict=True):
        n = sum(m_row)
        total, flags, a_sum = 0.0, [], 0.0
        for lp, olp, a, m in zip(lp_row, olp_row, a_row, m_row, strict=True):
            if not m:
                flags.append(False)
                continue
            rho = max(-20.0, min(20.0, lp - olp))
            c = min(max(rho, -eps_low), eps_high)
            sg = (a > 0) - (a < 0)
            use_rho = sg != 0 and sg * rho <= sg * c
            total += rho if use_rho else (c if sg != 0 else 0.0)
            flags.append(use_rho)
            a_sum += a
        s = math.exp(total / (n + 1e-8))
        a_i = a_sum / (n + 1e-8)
        value = -a_i * s / max(n, 1)
        out.append([(value, -a_i * s / (n + 1e-8) if f else 0.0) if m else (0.0, 0.0)
                    for f, m in zip(flags, m_row, strict=True)])
    return out


def _cov(lps, advs, mask):
    """[(i, j, cov)] over valid tokens, row-major, with the verl-style means."""
    cells = [(i, j) for i, row in enumerate(mask) for j, m in enumerate(row) if m]
    n = len(cells)
    mean_a = sum(advs[i][j] for i, j in cells) / (n + 1e-8)
    mean_lp = sum(lps[i][j] for i, j in cells) / (n + 1e-8)
    return [(i, j, (advs[i][j] - mean_a) * (lps[i][j] - mean_lp)) for i, j in cells], n


# every candidate selected (clip_cov_ratio 1): the random draw cannot matter
@reference("clip_cov", rows=True, cases=[
    {"clip_cov_ratio": 1.0, "clip_cov_lb": -0.5, "clip_cov_ub": 0.5},
    {"clip_cov_ratio": 1.0, "clip_cov_lb": 0.2, "clip_cov_ub": 5.0, "eps_high": 0.28}])
def clip_cov(lps, olps, advs, mask, *, eps_low=0.2, eps_high=0.2, clip_cov_ratio=0.0002,
             clip_cov_lb=1.0, clip_cov_ub=5.0):
    cells, _ = _cov(lps, advs, mask)
    out = [[(0.0, 0.0)] * len(row) for row in mask]
    for i, j, cov in cells:
        r, a = ratio(lps[i][j], olps[i][j]), advs[i][j]
        rc = min(max(r, 1 - eps_low), 1 + eps_high)
        cut = -a * rc > -a * r
        if not cut and clip_cov_lb < cov < clip_cov_ub:
            continue  # selected: loss times 0
        out[i][j] = (-a * rc, 0.0) if cut else (-a * r, -a * r)
    return out


@reference("kl_cov", rows=True, cases=[{}, {"kl_cov_ratio": 0.2, "ppo_kl_coef": 0.5}])
def kl_cov(lps, olps, advs, mask, *, kl_cov_ratio=0.0002, ppo_kl_coef=0.1):
    cells, n = _cov(lps, advs, mask)
    k = max(1, int(n * kl_cov_ratio)) if n else 0
    top = {(i, j) for i, j, _ in sorted(cells, key=lambda c: -c[2])[:k]}
    out = [[(0.0, 0.0)] * len(row) for row in mask]
    for i, j, _ in cells:
        rho = lps[i][j] - olps[i][j]
        r, a = ratio(lps[i][j], olps[i][j]), advs[i][j]
        value, grad = -a * r, -a * r
        if (i, j) in top:
            value += ppo_kl_coef * abs(rho)
            grad += ppo_kl_coef * math.copysign(1.0, rho)
        out[i][j] = (value, grad)
    return out


@reference("vespo", rows=True, cases=[{}, {"k_pos": 1.0, "lambda_pos": 0.5, "k_neg": 4.0,
                                          "lambda_neg": 6.0}])
def vespo(lps, olps, advs, mask, *, k_pos=2.0, lambda_pos=3.0, k_neg=3.0, lambda_neg=2.0):
    out = []
    for lp_row, olp_row, a_row, m_row in zip(lps, olps, advs, mask, strict=True):
        log_w = sum(max(-20.0, min(20.0, lp - olp))
                    for lp, olp, m in zip(lp_row, olp_row, m_row, strict=True) if m)
        log_w = max(math.log(1e-8), min(20.0, log_w))
        row = []
        for lp, a, m in zip(lp_row, a_row, m_row, strict=True):
            if not m:
                row.append((0.0, 0.0))
                continue
            k, lam = (k_pos, lambda_pos) if a >= 0 else (k_neg, lambda_neg)
            lam = max(lam, 1e-4)
            try:
                phi = math.exp(lam + k * log_w - lam * math.exp(log_w))
            except OverflowError:
                phi = 0.0
            row.append((-phi * a * lp, -phi * a))
        out.append(row)
    return out


@reference("importance_sampling")
def importance_sampling(lp, olp, a):
    r = ratio(lp, olp)
    inside = -20.0 < lp - olp < 20.0
    return -r * a, (-r * a if inside else 0.0)


@reference("cross_entropy")
def cross_entropy(lp, olp, a):
    return -lp, -1.0

