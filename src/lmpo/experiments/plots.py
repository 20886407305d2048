"""The report's plots: per-arm mean curves with a +-1 std band across seeds.

curves.png: reward, training accuracy, entropy, KL to the reference, held-out
accuracy (from the evaluation before training, step 0) and cumulative tokens
against step, and with a reward model its raw score, the checker's score and the
held-out reward; diagnostics.png: one panel per
method diagnostic; tokens.png: accuracy against cumulative rollout tokens (what
ESPO changes). Per-step training curves are smoothed by a moving average over
10 steps (said in each panel's title).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lmpo.experiments.diagnostics import method_diagnostics

CURVES = ["reward/mean", "reward/accuracy", "policy/entropy", "kl/ref",
          "eval/accuracy_trained", "tokens/cumulative"]
OPTIONAL_CURVES = ["reward/rm_mean", "reward/checker_mean", "eval/reward_mean"]  # if logged
SMOOTH = 10
SPARSE = ("eval/", "kl/", "diag/", "tokens/cumulative")  # sparse or cumulative: not smoothed


def series(rows: list[dict], metric: str) -> dict[int, float]:
    return {r["step"]: float(r[metric]) for r in rows if r.get(metric) is not None}


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    if window <= 1 or values.size < 2:
        return values
    kernel = np.ones(min(window, values.size))
    num = np.convolve(values, kernel, mode="full")[: values.size]
    den = np.convolve(np.ones(values.size), kernel, mode="full")[: values.size]
    return num / den  # a trailing mean over up to `window` steps


def arm_curve(runs: list[list[dict]], metric: str, x_metric: str | None = None):
    """(x, mean, std) over seeds at the steps every run logged; None if none."""
    per_run = [series(rows, metric) for rows in runs]
    steps = sorted(set.intersection(*(set(s) for s in per_run))) if per_run else []
    if not steps:
        return None
    window = 1 if metric.startswith(SPARSE) else SMOOTH
    ys = np.array([smooth(np.array([s[t] for t in steps]), window) for s in per_run])
    if x_metric is None:
        x = np.array(steps, dtype=float)
    else:
        xs = [series(rows, x_metric) for rows in runs]
        x = np.array([np.mean([s.get(t, np.nan) for s in xs]) for t in steps])
    std = ys.std(axis=0, ddof=1) if len(ys) > 1 else np.zeros(len(steps))
    return x, ys.mean(axis=0), std


def panel(ax, data: dict, metric: str, x_metric: str | None = None) -> bool:
    drawn = False
    for arm in data["experiment"].arms:
        runs = [([r["before_row"]] if metric.startswith("eval/") else []) + r["rows"]
                for (a, _), r in data["runs"].items() if a == arm.name and r["finished"]]
        curve = arm_curve(runs, metric, x_metric) if runs else None
        if curve is None:
            continue
        x, mean, std = curve
        (line,) = ax.plot(x, mean, label=f"{arm.name} (n={len(runs)})", linewidth=1.4)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2,
                        linewidth=0)
        drawn = True
    smoothed = "" if metric.startswith(SPARSE) else f" (moving avg {SMOOTH})"
    ax.set_title(metric + smoothed, fontsize=9)
    ax.set_xlabel("cumulative rollout tokens" if x_metric else "step", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    return drawn


def grid(data: dict, metrics: list[str], path: Path, x_metric: str | None = None,
         title: str = "") -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    drawn = False
    for ax, metric in zip(axes.flat, metrics, strict=False):
        drawn |= panel(ax, data, metric, x_metric)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    fig.suptitle(title + " (mean ± 1 std over seeds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn


def write_plots(data: dict, folder: Path) -> list[str]:
    """Write the PNGs into `folder`; returns their file names (relative to it)."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    logged = {k for r in data["runs"].values() for row in r["rows"] for k in row}
    curves = CURVES + [m for m in OPTIONAL_CURVES if m in logged and "reward/rm_mean" in logged]
    if grid(data, curves, folder / "curves.png", title="training and held-out curves"):
        written.append("curves.png")
    diags = list(dict.fromkeys(
        m for r in data["runs"].values() if r["config"] for m in method_diagnostics(r["config"])))
    if diags and grid(data, diags, folder / "diagnostics.png", title="method diagnostics"):
        written.append("diagnostics.png")
    if grid(data, ["eval/accuracy_trained", "reward/accuracy"], folder / "tokens.png",
            x_metric="tokens/cumulative", title="accuracy against rollout tokens"):
        written.append("tokens.png")
    return written
