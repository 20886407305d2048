"""`lmpo report DIR`: report.md, report.json and PNG plots of a `lmpo compare` directory.

Only finished runs enter the numbers (a run that failed or is still running is
listed in the setup). Each number is a per-seed value reduced from the run's
metrics.jsonl (`lmpo.experiments.stats.seeds`); the tables give mean +- std over seeds
and a 95% bootstrap CI; claims get paired-bootstrap verdicts.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from pathlib import Path

import yaml

from lmpo import __version__
from lmpo.atomic import write_text
from lmpo.errors import ConfigError
from lmpo.evaluate import metrics_row
from lmpo.experiments.design.frontier import frontier_lines, frontier_table
from lmpo.experiments.design.keys import COMPARATOR_KEY
from lmpo.experiments.design.spec import parse_experiment
from lmpo.experiments.engines.engine_logs import engine_rows
from lmpo.experiments.report.audit import (
    arm_configs,
    design_decision,
    effective_table,
    judge_claims,
    seed_values,
)
from lmpo.experiments.report.claim_table import claim_lines, fmt, sequential_lines
from lmpo.experiments.report.diagnostics import method_diagnostics
from lmpo.experiments.report.engagement import DEFAULT_FLOOR
from lmpo.experiments.stats.seeds import LEGACY_EFFECTIVE, summarize
from lmpo.legacy import upgrade_saved
from lmpo.process_env import cpu_model
from lmpo.trainer.checkpoint import read_rows
from lmpo.yamlfile import read_yaml_file

# report.json's layout (docs/experiments.md); 1: before engagement; 2: before the step-down;
# 3: before the exact tests and the variance components
SCHEMA_VERSION = 4
STANDARD = [  # (label, metric, reduce)
    ("held-out accuracy, trained tiers", "eval/accuracy_trained", "final"),
    ("held-out accuracy, all tiers", "eval/accuracy_mean", "final"),
    ("held-out reward, all tiers", "eval/reward_mean", "final"),
    ("entropy (mean of last 20 steps)", "policy/entropy", "last_k"),
    ("cumulative rollout tokens", "tokens/cumulative", "final"),
    ("KL to the reference (last logged)", "kl/ref", "final"),
    ("rollout log-prob mismatch (mean of last 20 logged)", "rollout/logp_mismatch", "last_k"),
    ("KL between consecutive policies (highest logged)", "kl/consecutive", "max"),
    ("skipped (non-finite) updates", "train/skipped_updates", "final"),
]
COVERAGE_NOTE = ("the per-arm tables' 95% bootstrap CIs resample the seeds, and with few "
                 "seeds they are too narrow (a nominal 95% percentile interval covers the "
                 "true mean ~74% of the time at n = 3, ~82% at n = 5): they are descriptive. "
                 "The claims use the inversion of their own test at every seed count (a "
                 "paired t interval, TOST's, or Pitman-Morgan's), which covers at its "
                 "nominal rate (tests/test_multiplicity.py).")


def git_commit() -> str:
    """The commit of lmpo's source that made the report, "with uncommitted changes" where
    that source differs from it."""
    here = Path(__file__).parent

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "not from a git checkout"
    # the code that judged: changes to lmpo's own source (not to results being written)
    return head + (" with uncommitted changes" if git("status", "--porcelain",
                                                      "--untracked-files=no", "--",
                                                      str(here.parent)) else "")


def machine() -> str:
    return f"{platform.machine()}, {cpu_model()}, {os.cpu_count()} cores, Python " \
           f"{platform.python_version()}"


def withdraw_sourceless(data: dict) -> dict:
    """A saved experiment as today's rules read it: fixed engagement levels written before
    a level needed its source are withdrawn (their claims read the measured same-batch
    engagement; docs/reproductions.md)."""
    claims = []
    for claim in data.get("claims") or []:
        if isinstance(claim, dict) and claim.get("engaged"):
            kept = [e for e in claim["engaged"] if isinstance(e, dict) and e.get("source")]
            claim = {k: v for k, v in claim.items() if k != "engaged"} | (
                {"engaged": kept} if kept else {})
        claims.append(claim)
    return data | {"claims": claims} if "claims" in data else data


def collect(root: Path) -> dict:
    """The experiment and, per arm and seed, the run's config, rows and state."""
    saved = root / "experiment.yaml"
    if not saved.exists():
        raise ConfigError(f"{root} is not a `lmpo compare` directory (no experiment.yaml)")
    from lmpo.experiments.report.rejudge import with_reanalysis

    raw = {"warm_starts": "shared"} | read_yaml_file(saved, what="saved experiment")  # before
    exp = parse_experiment(with_reanalysis(withdraw_sourceless(raw), root), root.name,
                           str(saved)).expand()
    if exp.design:  # seeds until decided: the looks this directory has started
        from lmpo.experiments.design.sequential import taken_seeds

        exp.seeds = taken_seeds(root, exp)
    runs = {}
    for arm in exp.arms:
        for seed in exp.seeds:
            run_dir = root / "runs" / arm.name / f"seed{seed}"
            cfg_path = root / "configs" / f"{arm.name}-seed{seed}.yaml"
            rows = read_rows(run_dir / "metrics.jsonl")
            done = (run_dir / "eval.json").exists() and bool(rows) and \
                rows[-1]["step"] == exp.steps
            summary = run_dir / "eval.json"
            saved = json.loads(summary.read_text()) if summary.exists() else {}
            before = saved.get("before")
            before_row = metrics_row(before) if before else {}
            engine = "lmpo"
            other = None if rows else engine_rows(run_dir, cfg_path)  # trained elsewhere
            if other:
                rows, before_row, engine = other
                done = bool(rows) and rows[-1]["step"] == exp.steps
            runs[(arm.name, seed)] = {
                "dir": run_dir, "rows": rows, "finished": done, "engine": engine,
                "before_row": {"step": 0, "tokens/cumulative": 0.0} | before_row,
                "records": (saved.get("after") or {}).get("records"),  # lmpo.evaluate
                "config": upgrade_saved(yaml.safe_load(cfg_path.read_text()))
                if cfg_path.exists() else None}
    return {"experiment": exp, "runs": runs}


def diagnostic_row(metric: str) -> tuple[str, str, str]:
    """(label, metric, reduce) of a mechanism diagnostic: a range end (..._min / ..._max) is
    its extreme over the run, anything else the mean of its last 20 logged values."""
    for suffix, reduce, word in (("_min", "min", "lowest"), ("_max", "max", "highest")):
        if metric.endswith(suffix):
            return f"{metric} ({word} logged)", metric, reduce
    return f"{metric} (mean of last 20 logged)", metric, "last_k"


def arm_table(data: dict) -> dict[str, dict[str, dict]]:
    """{arm: {label: summary}} for the standard metrics and every arm's own diagnostics,
    each for every arm that logged it (so a mechanism's quantity, computed for the matched
    arm too, sits next to it)."""
    exp = data["experiment"]
    configs = [r["config"] for r in data["runs"].values() if r["config"]]
    own = dict.fromkeys(m for cfg in configs for m in method_diagnostics(cfg))
    metrics = list(STANDARD) + [diagnostic_row(m) for m in own]
    table: dict[str, dict[str, dict]] = {}
    for arm in exp.arms:
        table[arm.name] = {}
        for label, metric, reduce in metrics:
            values = seed_values(data, arm.name, metric, reduce)
            if values:
                table[arm.name][label] = summarize(list(values.values())) | {
                    "metric": metric, "reduce": reduce, "seeds": list(values)}
    return table


def differences(data: dict) -> dict[str, dict[str, object]]:
    flats = arm_configs(data)
    keys = sorted({k for f in flats.values() for k in f
                   if not k.startswith(COMPARATOR_KEY)} - {"seed", "threads"})
    return {k: {a: f.get(k, "<unset>") for a, f in flats.items()} for k in keys
            if len({repr(f.get(k, "<unset>")) for f in flats.values()}) > 1}


def setup(data: dict, root: Path) -> dict:
    exp = data["experiment"]
    sweeps = json.loads((root / "sweep.json").read_text()) if (root / "sweep.json").exists() \
        else []
    runs = data["runs"]
    return {
        "experiment": exp.name, "description": exp.description, "notes": exp.notes,
        "seeds": exp.seeds,
        "steps": exp.steps, "arms": {a.name: a.preset for a in exp.arms},
        "policies": {a: f.get("policy") for a, f in arm_configs(data).items()},
        "differences": differences(data), "lmpo_version": __version__,
        "commit": git_commit(), "machine": machine(),
        "sweep_wall_s": sum(s.get("wall_s") or 0.0 for s in sweeps),
        "invocations": len(sweeps),
        "interrupted": sum(s.get("wall_s") is None for s in sweeps),
        "jobs": sorted({s.get("jobs") for s in sweeps}),
        "train_s": sum(r.get("time/step", 0.0) for run in runs.values() for r in run["rows"]),
        "finished": sum(r["finished"] for r in runs.values()), "runs": len(runs),
        "unfinished": sorted(f"{a}-seed{s}" for (a, s), r in runs.items()
                             if not r["finished"]),
        "engaged_floor": exp.engaged_floor if exp.engaged_floor is not None else DEFAULT_FLOOR,
    } | ({"conditions": {"axis": exp.conditions["axis"], "doses": {
        name: lv["dose"] for name, lv in exp.conditions["levels"].items()}}}
        if exp.conditions else {}) | warm_start_storage(exp, root)


def warm_start_storage(exp, root: Path) -> dict:
    """{warm_starts: {mode, pinned, bytes}} of a sweep whose runs start from their own
    seed's warm start (the folders pinned under `warmstarts/` and their size); {} else."""
    if exp.warm_starts != "per_seed":
        return {}
    folders = [p for p in (root / "warmstarts").glob("*") if p.is_dir()]
    size = sum(f.stat().st_size for p in folders for f in p.rglob("*") if f.is_file())
    return {"warm_starts": {"mode": "per_seed", "pinned": len(folders), "bytes": size}}


def cell(s: dict | None, n: int | None = None) -> str:
    """mean ± std [CI]; the seed count only where it differs from the arm's `n`."""
    if not s:
        return "-"
    std = "" if math.isnan(s["std"]) else f" ± {fmt(s['std'])}"
    few = f" (n={s['n']})" if s["n"] != n else ""
    return f"{fmt(s['mean'])}{std} [{fmt(s['ci'][0])}, {fmt(s['ci'][1])}]{few}"


def arm_n(table: dict, arm: str) -> int:
    return max((s["n"] for s in table[arm].values()), default=0)


def report(root: str | Path, out: str | Path | None = None, *, console=None,
           rejudge: bool = False) -> Path:
    """Write report.md, report.json and the plots; print the per-arm table. Returns the
    path of report.md. `rejudge`: the report already at `out` gives each claim's earlier
    label (`lmpo.experiments.report.rejudge`)."""
    from lmpo.experiments.report.components import add_components
    from lmpo.experiments.report.plots import write_dose_plots, write_plots
    from lmpo.experiments.report.rejudge import carry, earlier_labels

    root = Path(root)
    out = Path(out) if out else root / "report.md"
    data = collect(root)
    info, table, claims = setup(data, root), arm_table(data), judge_claims(data)
    add_components(claims, data)
    changes = carry(claims, earlier_labels(out.with_suffix(".json"))) if rejudge else []
    info["effective"] = effective_table(data)
    if data["experiment"].design:
        info["sequential"] = {"design": data["experiment"].design} | design_decision(data)
    info["frontier"] = frontier_table(data, data["experiment"].frontier) \
        if data["experiment"].frontier else {}
    plots = write_plots(data, out.parent)
    out.parent.mkdir(parents=True, exist_ok=True)
    plots += write_dose_plots(claims, out.parent)
    write_text(out.with_suffix(".json"), json.dumps(
        {"schema_version": SCHEMA_VERSION, "setup": info, "arms": table, "claims": claims,
         "plots": plots}, indent=2, default=str) + "\n")
    write_text(out, markdown(info, table, claims, plots))
    print_summary(info, table, claims, out, console)
    for claim, old, new in changes:
        print(f"re-judged: {claim}: {old} -> {new}")
    return out


def arm_policy(info: dict, arm: str) -> str:
    """", policy `X`" for an arm whose policy the report names (reports made before they
    named it render as they were)."""
    policy = (info.get("policies") or {}).get(arm)
    return f", policy `{policy}`" if policy else ""


def markdown(info: dict, table: dict, claims: list[dict], plots: list[str]) -> str:
    """report.md: the setup, the claims (a short table, then a card each), the plots, and
    an appendix with the wide tables (the arms' config differences, every metric per arm,
    the effective behaviour, the frontier)."""
    arms = list(table)
    labels = list(dict.fromkeys(label for t in table.values() for label in t))
    lines = [f"# {info['experiment']}: {info['description']}", "", "## Setup", "",
             "- arms: " + ", ".join(f"`{a}` (preset `{p}`{arm_policy(info, a)})"
                                     for a, p in info["arms"].items()),
             f"- seeds {info['seeds']}, {info['steps']} steps each; "
             f"{info['finished']} of {info['runs']} runs finished"
             + (f" (not finished, left out: {', '.join(info['unfinished'])})"
                if info["unfinished"] else ""),
             f"- lmpo {info['lmpo_version']}, commit {info['commit']}; {info['machine']}",
             f"- wall time {info['sweep_wall_s']:.0f} s over {info['invocations']} "
             f"invocation(s) of `lmpo compare` (jobs {info['jobs']}"
             + (f"; {info['interrupted']} interrupted, their time not counted"
                if info["interrupted"] else "") + f"); {info['train_s']:.0f} s of training "
             "steps in all"] + ([
                 f"- warm starts: each seed's own SFT draw; {ws['pinned']} pinned in "
                 f"warmstarts/ ({ws['bytes'] / 2**20:.1f} MiB)"]
                 if (ws := info.get("warm_starts")) else []) + ["",
             *[x for n in info.get("notes", []) for x in (f"**Note.** {n}", "")]]
    lines += sequential_lines(info.get("sequential") or {})
    lines += claim_lines(claims)
    lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += ["", "## Appendix: every arm", "", "What the arms' configs differ in:", "",
              "| key | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for key, vals in info["differences"].items():
        lines.append(f"| `{key}` | " + " | ".join(f"{vals.get(a, '-')}" for a in arms) + " |")
    lines += ["", "### Every metric", "",
              "mean ± std over seeds [95% bootstrap CI of the mean]; accuracy is exact, "
              "reward may be partial credit.", "",
              "| metric | " + " | ".join(f"{a} (n={arm_n(table, a)})" for a in arms) + " |",
              "|---|" + "---|" * len(arms)]
    for label in labels:
        lines.append(f"| {label} | " + " | ".join(cell(table[a].get(label), arm_n(table, a))
                                                   for a in arms) + " |")
    lines += effective_lines(info.get("effective") or {}, arms)
    lines += frontier_lines(info.get("frontier") or {}, arms, fmt, cell)
    lines += ["", "---", "", f"Note: {COVERAGE_NOTE}", ""]
    return "\n".join(lines)


EFFECTIVE_LABELS = {"grad_clip_share": "share of optimiser steps rescaled by gradient-norm "
                                      "clipping",
                    "step_norm": "norm of the step taken (post-clip, mean)",
                    "pre_clip_norm": "pre-clip gradient norm (mean; never flagged)",
                    "update_share": "share of generated samples in the update",
                    "rollout_tokens": "rollout tokens (cumulative)",
                    "reward_range": "reward range (max - min over the run)",
                    "adv_abs_mean": "mean \\|A\\| in the update",
                    "optim_steps": "optimiser steps taken"}


def effective_lines(effective: dict, arms: list[str]) -> list[str]:
    """The per-arm table of what each arm effectively did (means over seeds)."""
    effective = {a: {LEGACY_EFFECTIVE.get(k, k): v for k, v in q.items()}
                 for a, q in effective.items()}  # reports that predate the rename
    names = [n for n in EFFECTIVE_LABELS if any(n in effective.get(a, {}) for a in arms)]
    if not names:
        return ["", "### Effective behaviour", "",
                "Not logged by these runs (they predate the per-step audit logs)."]
    lines = ["", "### Effective behaviour", "",
             "Means over seeds. A claim whose arms differ here beyond the tolerance (ratio "
             "1.5 for norms and counts, 0.2 absolute for shares) in a quantity that does not "
             "mediate its treatment is confounded.", "",
             "| quantity | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for name in names:
        lines.append(f"| {EFFECTIVE_LABELS[name]} | " + " | ".join(
            fmt(effective.get(a, {}).get(name, {}).get("mean")) for a in arms) + " |")
    return lines


def print_summary(info, table, claims, out: Path, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(150, Console().width))
    t = Table(title=f"{info['experiment']}: mean ± std over seeds [95% bootstrap CI]")
    t.add_column("metric")
    for arm in table:
        t.add_column(f"{arm} (n={arm_n(table, arm)})", justify="right")
    for label in dict.fromkeys(label for v in table.values() for label in v):
        t.add_row(label, *[cell(table[a].get(label), arm_n(table, a)) for a in table])
    console.print(t)
    for c in claims:
        at = f" at {c['level']}" if c.get("level") else ""
        console.print(f"claim {c['claim']}{at}: {c['verdict']}"
                      + (f" ({c['reason']})" if c.get("reason") else "")
                      + f"; effect {fmt(c['effect'])}, CI [{fmt(c['ci'][0])}, "
                        f"{fmt(c['ci'][1])}], n={c['n']}")
    console.print(f"report: {out} (plots and report.json beside it)")
