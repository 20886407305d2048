"""prime-rl's default loss (DPPO-TV mask + squared log-ratio KL) and its ipo loss, from
prime-rl's trainer/rl/loss.py (default_loss_fn, ipo_loss_fn)."""

from __future__ import annotations

import math

from tests.loss_references import reference


def _value_and_grad(lp, olp, a, dropped, adv_tau, kl_tau):
    rho = max(min(lp - olp, 20.0), -20.0)
    r = math.exp(rho)
    pg, pg_grad = (0.0, 0.0) if dropped else (adv_tau * a * r, adv_tau * a * r)
    return -pg + kl_tau * rho * rho, -pg_grad + 2.0 * kl_tau * rho


@reference("dppo_tv_kl", cases=[{}, {"delta_low": 0.05, "delta_high": 0.02, "adv_tau": 0.5,
                                     "kl_tau": 0.3}])
def dppo_tv_kl(lp, olp, a, *, delta_low=0.2, delta_high=0.2, adv_tau=1.0, kl_tau=1e-3):
    diff = math.exp(lp) - math.exp(olp)
    dropped = diff > delta_high if a > 0 else diff < -delta_low
    return _value_and_grad(lp, olp, a, dropped, adv_tau, kl_tau)


@reference("ipo", cases=[{}, {"threshold": 0.03, "adv_tau": 2.0, "kl_tau": 0.1}])
def ipo(lp, olp, a, *, threshold=0.1, adv_tau=1.0, kl_tau=1e-3):
    dropped = abs(math.exp(lp) - math.exp(olp)) > threshold
    return _value_and_grad(lp, olp, a, dropped, adv_tau, kl_tau)
