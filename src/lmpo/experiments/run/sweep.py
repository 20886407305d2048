"""`lmpo compare`: every arm x seed of an experiment as an ordinary `lmpo train` run.

Layout of `--out DIR`:

    experiment.yaml              the experiment as run (seeds and steps resolved)
    configs/<arm>-seed<k>.yaml   each run's fully resolved config
    runs/<arm>/seed<k>/          each run's directory (metrics.jsonl, eval.json, ...);
                                 with a condition axis `runs/<arm>@<level>/seed<k>/`
    logs/<arm>-seed<k>.log       each run's output
    sweep.json                   wall time, jobs and outcome of each invocation

Every run is `python -m lmpo train --config configs/... --run-dir runs/... --resume`,
so a second invocation skips finished runs and continues killed ones from their
checkpoints (a run is deterministic for a given thread count, and `--jobs J` fixes
threads = cores / J). On Linux each run is forked from a server that has imported the
trainer once (lmpo.experiments.run.launcher), not a fresh interpreter. Run processes die with
the sweep (Linux parent-death signal), so `kill -9` of the sweep leaves nothing running.
Pending runs start seed by seed (every arm of the first seed, then of the next), so a
sweep stopped part-way holds whole seeds of every arm rather than every seed of the first
arms. `--list` prints the commands, in that order, for another scheduler; `lmpo report`
reads the directories whatever ran them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from lmpo.atomic import write_text
from lmpo.config import save_config
from lmpo.errors import ConfigError, Interrupted, LmpoError
from lmpo.experiments.design.spec import RUN_KEYS, Experiment, arm_config, check_differs
from lmpo.experiments.run.launchers import (
    DEFAULT_LAUNCHER,
    LAUNCHERS,
    Launcher,
    build_launcher,
    check_address,
)
from lmpo.experiments.run.upfront import check_experiment
from lmpo.locks import directory_lock
from lmpo.trainer.checkpoint import read_rows

WARMSTARTS = "warmstarts"  # the sweep's pinned warm starts (lmpo.warmstart.pin)


@dataclass
class Run:
    arm: str
    seed: int
    config: Path
    run_dir: Path
    log: Path
    status: str = "pending"  # pending | running | done | failed | refused (by the engine)
    error: str = ""
    started: float = 0.0
    engine: str = "lmpo"  # lmpo | trl (lmpo.integrations.trl_run)

    @property
    def name(self) -> str:
        return f"{self.arm}-seed{self.seed}"

    def command(self) -> list[str]:
        program = ["lmpo", "train"] if self.engine == "lmpo" else ["lmpo.integrations.trl_run"]
        return [sys.executable, "-m", *program, "--config", str(self.config),
                "--run-dir", str(self.run_dir), "--quiet", "--resume"]


def finished(run_dir: Path, steps: int) -> bool:
    rows = read_rows(run_dir / "metrics.jsonl")
    return (run_dir / "eval.json").exists() and bool(rows) and rows[-1]["step"] == steps


def plan(exp: Experiment, out: Path, jobs: int, engine: str = "lmpo") -> list[Run]:
    """Check the experiment, write its configs under `out` and return its runs.

    Everything is checked before anything is written (lmpo.experiments.run.upfront: every
    arm builds, trains on tiers its task has, and logs every metric the claims read;
    `differs_in`): a broken arm stops the sweep before its first run, not after the
    others have trained."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    saved = out / "experiment.yaml"
    if saved.exists():
        before, now = yaml.safe_load(saved.read_text()), exp.to_dict()
        changed = [k for k in RUN_KEYS if before.get(k) != now.get(k)]
        if changed:
            raise ConfigError(f"{out} holds a different experiment ({saved}: {', '.join(changed)} "
                              "differ); resume it with the same file, --seeds and --steps, or "
                              "choose a new --out")
    flat = exp.expand()  # arms x condition levels, as `arm@level`
    check_experiment(flat, exp.seeds[0])
    check_differs(flat)
    (out / "configs").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    write_text(saved, yaml.safe_dump(exp.to_dict(), sort_keys=False))
    runs = []
    for arm in flat.arms:
        for seed in exp.seeds:
            run = Run(arm.name, seed, out / "configs" / f"{arm.name}-seed{seed}.yaml",
                      out / "runs" / arm.name / f"seed{seed}",
                      out / "logs" / f"{arm.name}-seed{seed}.log", engine=engine)
            cfg = arm_config(flat, arm, seed, threads=threads)
            save_config(cfg, run.config)
            refused = engine_refusals(engine, cfg)
            if refused:
                run.status, run.error = "refused", "; ".join(refused)
            elif finished(run.run_dir, exp.steps):
                stale = config_changes(run.run_dir, cfg)
                if stale:
                    run.status, run.error = "failed", (
                        f"finished under another config ({stale}); delete {run.run_dir} "
                        "to run it again")
                else:
                    run.status = "done"
            runs.append(run)
    return runs


def start_order(exp: Experiment, runs: list[Run]) -> list[Run]:
    """`runs` seed by seed, within a seed level by level, in the experiment's arm order."""
    arm_index = {arm.name: i for i, arm in enumerate(exp.expand().arms)}
    return sorted(runs, key=lambda r: (exp.seeds.index(r.seed), arm_index[r.arm]))


def engine_refusals(engine: str, cfg) -> list[str]:
    """What `engine` cannot express in `cfg` (lmpo expresses everything)."""
    if engine == "trl":
        from lmpo.experiments.engines.trl_mapping import trl_refusals

        return trl_refusals(cfg)
    return []


def config_changes(run_dir: Path, cfg) -> str:
    """'' if the run in `run_dir` ran `cfg` (up to keys a resume may change, and keys a
    newer lmpo added at their default), else the keys that differ."""
    from lmpo.trainer.resume import changes_since

    saved = run_dir / "config.yaml"
    if not saved.exists():
        return ""
    old = yaml.safe_load(saved.read_text()) or {}
    return "; ".join(x.strip() for x in changes_since(old, cfg))


def last_error(log: Path) -> str:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] \
        if log.exists() else []
    errors = [x for x in lines if "error" in x.lower()]
    return (errors or lines or ["no output"])[-1].strip()[:300]


class LastRows:
    """Each run's last rows, re-read only when its metrics file changed (size, mtime): the
    live table reads the files that grow, not all of them (45 runs x 300 rows: ~0.5 s)."""

    def __init__(self, keep: int = 20):
        self.keep, self.seen = keep, {}

    def __call__(self, run_dir: Path) -> list[dict]:
        path = run_dir / "metrics.jsonl"
        try:
            st = path.stat()
        except FileNotFoundError:
            return []
        key = (st.st_size, st.st_mtime_ns)
        cached = self.seen.get(path)
        if cached is None or cached[0] != key:
            cached = (key, read_rows(path)[-self.keep:])
            self.seen[path] = cached
        return cached[1]


def status_table(exp: Experiment, runs: list[Run], last_rows: LastRows):
    """The live table of `runs`, their last rows read through `last_rows`."""
    from rich.table import Table

    levels = len(exp.conditions.get("levels") or {}) if exp.conditions else 0
    table = Table(title=f"lmpo compare {exp.name}: {len(exp.arms)} arms x "
                        + (f"{levels} levels x " if levels else "")
                        + f"{len(exp.seeds)} seeds, {exp.steps} steps")
    for col in ("arm", "seed", "status", "step", "reward", "accuracy", "ETA"):
        table.add_column(col, justify="right" if col not in ("arm", "status") else "left")
    for run in runs:
        rows = last_rows(run.run_dir)
        last = rows[-1] if rows else {}
        step = last.get("step", 0)
        eta = "-"
        if run.status == "running" and rows:
            per_step = sum(r.get("time/step", 0.0) for r in rows[-20:]) / len(rows[-20:])
            eta = f"{per_step * (exp.steps - step):.0f} s"
        table.add_row(run.arm, str(run.seed), run.status, f"{step}/{exp.steps}",
                      f"{last['reward/mean']:.3f}" if "reward/mean" in last else "-",
                      f"{last['reward/accuracy']:.3f}" if "reward/accuracy" in last else "-",
                      eta)
    return table


def execute(exp: Experiment, runs: list[Run], out: Path, pool: Launcher, *,
            live: bool = True) -> None:
    """Run the pending runs through `pool` (a launcher: `lmpo.experiments.run.launchers`),
    as many at once as it has room for, updating each run's
    status. A run whose machine went away runs again (it resumes from its checkpoint), at
    most `pool.retries` times; one that exits with an error is reported failed. Whatever
    ends the sweep, `pool.close()` stops what is still running."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    queue = start_order(exp, [r for r in runs if r.status == "pending"])
    active: dict[str, tuple[Run, object]] = {}
    retried: dict[str, int] = {}
    started = time.time()
    history = out / "sweep.json"
    past = read_history(history)
    record = {"started": started, "wall_s": None, **pool.describe(), "status": "interrupted"}
    write_text(history, json.dumps([*past, record], indent=2) + "\n")  # None if killed
    show = live and console.is_terminal
    from lmpo.warmstart import PINNED_ENV

    env = os.environ | {"PYTHONUNBUFFERED": "1", PINNED_ENV: str((out / WARMSTARTS).absolute())}
    last_rows, shown_at = LastRows(), 0.0

    def say(line: str) -> None:
        if not show:
            console.print(line, highlight=False)
    try:
        with Live(status_table(exp, runs, last_rows), console=console, refresh_per_second=2,
                  transient=False) if show else contextlib.nullcontext() as view:
            while queue or active:
                while queue and pool.free():
                    run = queue.pop(0)
                    run.run_dir.parent.mkdir(parents=True, exist_ok=True)
                    handle = pool.start(run, env)
                    active[run.name] = (run, handle)
                    run.status, run.started = "running", time.time()
                    say(f"started {run.name}{pool.where(handle)}")
                time.sleep(0.5)
                for name, (run, handle) in list(active.items()):
                    outcome = pool.poll(handle)
                    if outcome is None:
                        continue
                    del active[name]
                    if outcome.lost and retried.get(name, 0) < pool.retries:
                        retried[name] = retried.get(name, 0) + 1
                        run.status = "pending"
                        queue.insert(0, run)  # resumes from its last checkpoint
                        say(f"retrying {run.name}: {outcome.lost} (retry {retried[name]} of "
                            f"{pool.retries})")
                        continue
                    ok = not outcome.lost and outcome.code == 0 and finished(run.run_dir,
                                                                              exp.steps)
                    run.status = "done" if ok else "failed"
                    run.error = "" if ok else outcome.lost or \
                        f"exit {outcome.code}: {last_error(run.log)}"
                    say(f"{run.status} {run.name} ({time.time() - run.started:.0f} s)"
                        + (f": {run.error}" if run.error else ""))
                if show and (time.time() - shown_at >= 2.0 or not (queue or active)):
                    view.update(status_table(exp, runs, last_rows))  # off a terminal: none
                    shown_at = time.time()
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (lmpo.errors.Interrupted)
        record["interrupted"] = "SIGTERM" if isinstance(exc, Interrupted) else "SIGINT"
        for run, _ in active.values():
            run.status = "interrupted"
        raise
    finally:
        pool.close()  # stops what still runs, at its last checkpoint
        record |= {"wall_s": time.time() - started,
                   "status": {r.name: r.status for r in runs}}
        if retried:
            record["retried"] = retried
        write_text(history, json.dumps([*past, record], indent=2) + "\n")


def read_history(path: Path) -> list:
    """sweep.json's records; a damaged one (cut short by an older lmpo, or edited) is kept
    aside as sweep.json.damaged, said in one line, and the history starts again."""
    if not path.exists():
        return []
    try:
        past = json.loads(path.read_text())
        if isinstance(past, list):
            return past
    except (ValueError, UnicodeDecodeError):
        pass
    aside = path.with_name(path.name + ".damaged")
    os.replace(path, aside)
    print(f"lmpo compare: {path} was not a list of records; kept it as {aside} and started "
          "the history again (the runs are read from their own directories)", file=sys.stderr)
    return []


def next_look(exp: Experiment, out: Path) -> list[int] | None:
    """The seeds of the next look of a sequential design, or None where the headline
    family is decided or `max` is reached (said in one line either way)."""
    from lmpo.experiments.design.sequential import all_seeds
    from lmpo.experiments.report.audit import design_decision
    from lmpo.experiments.report.write import collect

    decision = design_decision(collect(out))
    looks = ", ".join(f"{x['n']} seeds" for x in decision["looks"])
    if decision["next"] is None:
        print(f"seeds until decided: stopped after looks at {looks} ({decision['stopped']})")
        return None
    print(f"seeds until decided: after looks at {looks} a headline claim is undecided; "
          f"adding seeds up to {decision['next']}")
    return all_seeds(exp.design)[:decision["next"]]


def prebuild(runs: list[Run], out: Path | None = None) -> None:
    """Build the warm-start policies (and convert the packaged models) that the pending runs
    start from, once, before any starts: a run would build it on its share of the cores
    while the others wait. With `out`, each warm-start preset is pinned in
    `out/warmstarts/<name>/` (the first build's copy, kept for every later look and
    machine: `lmpo.warmstart`). A policy that cannot be resolved is left to its runs, which
    fail with the error while the other arms go on."""
    from lmpo.warmstart import is_preset, pin, resolve_policy

    pending = [r for r in runs if r.status == "pending"]
    for policy in dict.fromkeys(yaml.safe_load(r.config.read_text())["policy"] for r in pending):
        try:
            if out is not None and is_preset(policy):
                pin(policy, out / WARMSTARTS)
            else:
                resolve_policy(policy)
        except LmpoError:
            continue


def compare(exp: Experiment, out: str | Path, *, jobs: int = 1, list_only: bool = False,
            live: bool = True, engine: str = "lmpo", launcher_name: str = DEFAULT_LAUNCHER,
            address: str | None = None) -> int:
    """Plan and run (or, with `list_only`, print) the sweep; 0 if every run finished.

    `launcher_name` names a launcher (`lmpo.experiments.run.launchers`): "pool" runs at
    most `jobs` runs at once here; "ray" runs them as Ray tasks, `jobs` per node, on the
    cluster at `address` (None: a local Ray this call starts and stops). The sweep holds
    `out`'s lock throughout (a second `lmpo compare` on it fails at once, naming this
    one); each run's process holds its own run directory's. An `out` this call created is
    removed again if the experiment cannot be planned."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    meta = LAUNCHERS.meta(launcher_name)  # one line naming the valid ones
    check_address(launcher_name, address)
    out = Path(out).absolute() if meta["absolute_out"] else Path(out)
    fresh = not out.exists()
    with directory_lock(out, what="lmpo compare"):
        if exp.design and (out / "experiment.yaml").exists():
            from lmpo.experiments.design.sequential import taken_seeds

            exp.seeds = taken_seeds(out, exp)  # resume at the looks already started
        try:
            runs = plan(exp, out, jobs, engine)
        except LmpoError:
            if fresh:
                shutil.rmtree(out, ignore_errors=True)
            raise
        if list_only:
            for run in start_order(exp, runs):
                print(shlex.join(run.command()) if run.status != "refused"
                      else f"# refused: {run.name}: {run.error}")
            if exp.design:
                print(f"# seeds until decided: later blocks ({exp.design}) are added by "
                      "`lmpo compare` after judging each look")
            return 0
        while True:
            prebuild(runs, out)
            pool = build_launcher(launcher_name, jobs=jobs, out=out, address=address)
            execute(exp, runs, out, pool, live=live)
            if not exp.design or any(r.status == "failed" for r in runs):
                break
            more = next_look(exp, out)
            if more is None:
                break
            exp.seeds = more
            runs = plan(exp, out, jobs, engine)
    refused = [r for r in runs if r.status == "refused"]
    for run in refused:
        print(f"refused by {engine}: {run.name}: {run.error}", file=sys.stderr)
    if refused and len(refused) == len(runs):
        print(f"lmpo compare: error: no arm runs on {engine}", file=sys.stderr)
        return 1
    runs = [r for r in runs if r.status != "refused"]
    failed = [r for r in runs if r.status == "failed"]
    if failed:
        print(f"\n{len(failed)} of {len(runs)} runs failed (the others finished):",
              file=sys.stderr)
        for run in failed:
            print(f"  {run.name}: {run.error} (log: {run.log})", file=sys.stderr)
        return 1
    print(f"all {len(runs)} runs finished in {out}; next: lmpo report {out}")
    return 0
