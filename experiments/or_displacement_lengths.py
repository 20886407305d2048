"""Does the response length cap Output Reset's displacement ratio? A re-analysis of the
committed output_reset_long4 runs (no new runs).

The paper's per-sequence displacement (the sum over a response of |log pi - log
pi_rollout| after the update) is ~5-13 for the group family and ~0.3-0.5 for GAE, a
multiple of about 10-25x; on the testbed the ratio is 1.17x. A per-sequence sum is the
per-token mean times the length, so the ratio of two arms splits exactly into the
per-token ratio times the length ratio. This script gives, per pair (GRPO / PPO-clip and
GRPO-OR / PPO-OR), over each seed's last 20 steps (the claims' window): the per-sequence
ratio, its per-token and length factors, and the per-sequence ratio within bins of the
step's mean response length (tertiles of all steps of both arms), each as the mean over
seeds with a 95% t interval.

    python experiments/or_displacement_lengths.py \
        --sweep experiments/results/output_reset_long4/sweep \
        --out experiments/results/output_reset_long4/displacement_lengths.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from scipy import stats

PAIRS = (("grpo", "ppo_clip"), ("grpo_or", "ppo_or"))
SEQ, TOK, LEN = "diag/displacement_seq_after", "diag/displacement_after", "response/length_mean"
WINDOW = 20


def rows_of(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if SEQ in r and TOK in r and LEN in r]


def interval(values: list[float]) -> dict:
    x = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if len(x) < 2:
        return {"mean": float(x.mean()) if len(x) else None, "low": None, "high": None,
                "n": len(x)}
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return {"mean": float(x.mean()), "low": float(x.mean() - half),
            "high": float(x.mean() + half), "n": len(x)}


def pair_breakdown(runs: Path, a: str, b: str) -> dict:
    seeds = sorted({p.name for p in (runs / a).iterdir()} & {p.name for p in (runs / b).iterdir()})
    rows = {(arm, s): rows_of(runs / arm / s) for arm in (a, b) for s in seeds}
    every = np.array([r[LEN] for rs in rows.values() for r in rs])
    cuts = np.quantile(every, [1 / 3, 2 / 3])
    seq, tok, length = [], [], []
    bins: list[list[float]] = [[], [], []]
    for s in seeds:
        last = {arm: rows[(arm, s)][-WINDOW:] for arm in (a, b)}
        mean = {arm: {k: np.mean([r[k] for r in last[arm]]) for k in (SEQ, TOK, LEN)}
                for arm in (a, b)}
        seq.append(mean[a][SEQ] / mean[b][SEQ])
        tok.append(mean[a][TOK] / mean[b][TOK])
        length.append(mean[a][LEN] / mean[b][LEN])
        for i in range(3):
            lo, hi = [-np.inf, *cuts][i], [*cuts, np.inf][i]
            within = {arm: [r[SEQ] for r in rows[(arm, s)] if lo <= r[LEN] < hi]
                      for arm in (a, b)}
            bins[i].append(np.mean(within[a]) / np.mean(within[b])
                           if within[a] and within[b] else np.nan)
    edges = [float(every.min()), *map(float, cuts), float(every.max())]
    return {"pair": f"{a} / {b}", "seeds": len(seeds), "last_steps": WINDOW,
            "per_sequence_ratio": interval(seq), "per_token_ratio": interval(tok),
            "length_ratio": interval(length),
            "by_length": [{"length": [edges[i], edges[i + 1]], "all_steps": True,
                           "per_sequence_ratio": interval(bins[i])} for i in range(3)],
            "per_sequence": {arm: interval([np.mean([r[SEQ] for r in rows[(arm, s)][-WINDOW:]])
                                            for s in seeds]) for arm in (a, b)},
            "length": {arm: interval([np.mean([r[LEN] for r in rows[(arm, s)][-WINDOW:]])
                                      for s in seeds]) for arm in (a, b)}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    out = {"source": "output_reset_long4's committed runs (a re-analysis: no new runs)",
           "pairs": [pair_breakdown(args.sweep / "runs", a, b) for a, b in PAIRS]}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for p in out["pairs"]:
        r, t, n = p["per_sequence_ratio"], p["per_token_ratio"], p["length_ratio"]
        bins = ", ".join(f"{b['length'][0]:.0f}-{b['length'][1]:.0f} tokens "
                         f"{b['per_sequence_ratio']['mean']:.2f}x" for b in p["by_length"])
        print(f"{p['pair']}: per sequence {r['mean']:.2f}x [{r['low']:.2f}, {r['high']:.2f}] = "
              f"per token {t['mean']:.2f}x x length {n['mean']:.3f}x; by length: {bins}")


if __name__ == "__main__":
    main()
