"""Dose-response claims: a pair's effect at every condition level, and its trend over the
levels' doses.

    - kind: dose_response
      metric: policy/entropy
      reduce: last_k
      arms: [cegppo, grpo]          # the effect is metric(cegppo) - metric(grpo), per seed
      expect: greater               # the sign of the effect's slope over the dose
      min_effect: 0.005             # the smallest change over the dose range that matters
      x: rollout/logp_mismatch      # optional: a metric reported per level beside the dose

Per level: the paired effect with its interval (descriptive; Holm-adjusted over the
levels) and the pair's same-batch engagement. The trend: for each seed, the least-squares
slope of its effect on the levels' doses (never on engagement, which the treatment itself
moves); the claim's statistic is the slope times the dose range (the fitted change from
the lowest to the highest dose, in the metric's units, so `min_effect` reads as for any
claim), judged as a direction claim on those per-seed values.
"""

from __future__ import annotations

import numpy as np

from lmpo.experiments.stats.kinds import claim_kind
from lmpo.experiments.stats.multiplicity import holm_adjust, step_down_alphas


def seed_effects(per_level: dict[str, tuple[dict, dict]], seeds: list[int]
                 ) -> tuple[list[int], np.ndarray]:
    """(seeds every arm has at every level, effects [seeds, levels]) from
    {level: ({seed: a}, {seed: b})}."""
    kept = [s for s in seeds if all(s in a and s in b for a, b in per_level.values())]
    effects = np.array([[a[s] - b[s] for a, b in per_level.values()] for s in kept],
                       dtype=float).reshape(len(kept), len(per_level))
    return kept, effects


def slopes(effects: np.ndarray, doses: np.ndarray) -> np.ndarray:
    """Each row's least-squares slope on `doses`."""
    d = doses - doses.mean()
    return (effects - effects.mean(axis=1, keepdims=True)) @ d / float(d @ d)


def trend_claim(claim: dict) -> dict:
    """The direction claim a trend is judged as (its per-seed values: the change over the
    dose range, against 0)."""
    return {k: v for k, v in claim.items() if k not in ("x", "by_level")} | {
        "kind": claim_kind(claim["kind"]).judged_kind}


def level_results(claim: dict, effects: np.ndarray, levels: list[str]) -> list[dict]:
    """The effect at each level with its 95% interval and its interval adjusted over the
    levels (Holm's step-down, `lmpo.experiments.stats.multiplicity`): descriptive, never a
    label (the same comparison's level claim, where the experiment makes one, carries
    it)."""
    pseudo = trend_claim(claim)
    judged = claim_kind(pseudo["kind"])
    zeros = np.zeros(effects.shape[0])
    enough = effects.shape[0] >= 3
    ps = [judged.p_value(pseudo, effects[:, j], zeros) if enough else float("nan")
          for j in range(len(levels))]
    alphas, adjusted = step_down_alphas(ps), holm_adjust(ps)
    out = []
    for j, level in enumerate(levels):
        x = effects[:, j]
        if not enough:
            out.append({"level": level, "effect": float(x.mean()) if x.size else None,
                        "ci": None, "ci_holm": None, "n": int(x.size)})
            continue
        point, lo, hi, _ = judged.interval(pseudo, x, zeros)
        ci_adj = list(judged.interval(pseudo, x, zeros, 1 - alphas[j])[1:3])
        out.append({"level": level, "effect": point, "ci": [lo, hi], "ci_holm": ci_adj,
                    "p": ps[j], "p_adj": adjusted[j], "n": int(x.size)})
    return out


def trend_values(effects: np.ndarray, doses: np.ndarray) -> np.ndarray:
    """Per seed: the slope times the dose range."""
    return slopes(effects, doses) * float(doses.max() - doses.min())
