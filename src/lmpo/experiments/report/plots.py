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

from lmpo.experiments.report.diagnostics import method_diagnostics
from lmpo.experiments.stats.kinds import claim_kind

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


LINESTYLES = ("-", "--", ":", "-.")


def arm_styles(names: list[str]) -> dict[str, dict]:
    """A fixed colour and line style per arm, the same in every panel and plot: the colour
    by the arm (tab20, in the experiment's order), the line style by its condition level
    (`arm@level`), so an arm keeps its colour across levels."""
    from matplotlib import colormaps

    from lmpo.experiments.design.conditions import split_arm

    bases = list(dict.fromkeys(split_arm(n)[0] for n in names))
    levels = list(dict.fromkeys(split_arm(n)[1] for n in names))
    palette = colormaps["tab20"].colors if len(bases) > 10 else colormaps["tab10"].colors
    out = {}
    for n in names:
        base, level = split_arm(n)
        i = bases.index(base)
        style = LINESTYLES[(levels.index(level) + i // len(palette)) % len(LINESTYLES)]
        out[n] = {"color": palette[i % len(palette)], "linestyle": style}
    return out


def panel(ax, data: dict, metric: str, x_metric: str | None = None) -> bool:
    drawn = False
    styles = arm_styles([a.name for a in data["experiment"].arms])
    for arm in data["experiment"].arms:
        runs = [([r["before_row"]] if metric.startswith("eval/") else []) + r["rows"]
                for (a, _), r in data["runs"].items() if a == arm.name and r["finished"]]
        curve = arm_curve(runs, metric, x_metric) if runs else None
        if curve is None:
            continue
        x, mean, std = curve
        (line,) = ax.plot(x, mean, label=f"{arm.name} (n={len(runs)})", linewidth=1.4,
                          **styles[arm.name])
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.12,
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


def write_dose_plots(claims: list[dict], folder: Path) -> list[str]:
    """dose_<k>.png for each dose_response claim: its effect against the levels' doses
    (95% interval bars, 0 dashed) and, as a second panel, the pair's same-batch engagement
    at each level (with its floor)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for k, c in enumerate(x for x in claims if claim_kind(x["kind"]).over_levels):
        levels = [lv for lv in c.get("levels", []) if "effect" in lv]
        if not levels:
            continue
        fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
        dose = np.array([lv["dose"] for lv in levels])
        effect = np.array([lv["effect"] for lv in levels])
        err = np.array([[lv["effect"] - lv["ci"][0] for lv in levels],
                        [lv["ci"][1] - lv["effect"] for lv in levels]])
        left.errorbar(dose, effect, yerr=err, marker="o", capsize=3, linewidth=1.4)
        left.axhline(0.0, color="grey", linestyle="--", linewidth=0.8)
        for lv in levels:
            left.annotate(lv["level"], (lv["dose"], lv["effect"]), fontsize=7,
                          textcoords="offset points", xytext=(4, 4))
        left.set_title(f"effect: {c['claim'].split(':')[0]} (95% CI)", fontsize=9)
        left.set_xlabel("dose", fontsize=8)
        measured = [lv for lv in levels if lv.get("engagement", {}).get("value") is not None]
        if measured:
            ed = np.array([lv["dose"] for lv in measured])
            ev = np.array([lv["engagement"]["value"] for lv in measured])
            ci = np.array([lv["engagement"]["ci"] for lv in measured], dtype=float)
            bars = np.nan_to_num(np.abs(np.stack([ev - ci[:, 0], ci[:, 1] - ev])))
            right.errorbar(ed, ev, yerr=bars, marker="s", color="tab:orange", capsize=3)
            right.axhline(measured[0]["engagement"]["floor"], color="grey", linestyle=":",
                          linewidth=0.8, label="engaged floor")
            right.legend(fontsize=7)
            right.set_title("same-batch engagement: " + measured[0]["engagement"]["metric"],
                            fontsize=9)
        else:
            right.set_title("same-batch engagement: not measured", fontsize=9)
        right.set_xlabel("dose", fontsize=8)
        for ax in (left, right):
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        fig.tight_layout()
        name = f"dose_{k}.png"
        fig.savefig(folder / name, dpi=100)
        plt.close(fig)
        written.append(name)
    return written
