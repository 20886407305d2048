"""Running a sweep's runs through a launcher: the order they start in, the live status
table, and `execute`, which starts what the launcher has room for, settles what ended
(retrying a run whose machine went away) and records each invocation in sweep.json.
`lmpo.experiments.run.sweep` plans the runs and calls it."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from lmpo.atomic import write_text
from lmpo.errors import Interrupted
from lmpo.experiments.design.spec import Experiment
from lmpo.experiments.run.launchers import Launcher
from lmpo.trainer.checkpoint import read_rows

WARMSTARTS = "warmstarts"  # the sweep's pinned warm starts (lmpo.warmstart.pin)


def finished(run_dir: Path, steps: int) -> bool:
    rows = read_rows(run_dir / "metrics.jsonl")
    return (run_dir / "eval.json").exists() and bool(rows) and rows[-1]["step"] == steps


def start_order(exp: Experiment, runs: list) -> list:
    """`runs` seed by seed, within a seed level by level, in the experiment's arm order."""
    arm_index = {arm.name: i for i, arm in enumerate(exp.expand().arms)}
    return sorted(runs, key=lambda r: (exp.seeds.index(r.seed), arm_index[r.arm]))


def last_error(log: Path) -> str:
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] \
        if log.exists() else []
    errors = [x for x in lines if "error" in x.lower()]
    return (errors or lines or ["no output"])[-1].strip()[:300]


def resumed_from(run_dir) -> str:
    """'started ' for a fresh run, 'resumed (after step N) ' for one with a checkpoint."""
    from lmpo.trainer.checkpoint import checkpoint_step, latest_checkpoint

    last = latest_checkpoint(run_dir) if run_dir.exists() else None
    return "started " if last is None else f"resumed (after step {checkpoint_step(last)}) "


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


def status_table(exp: Experiment, runs: list, last_rows: LastRows):
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


@dataclass
class Dispatch:
    """The runs in flight through a launcher: start what it has room for, and settle what
    ended (a run whose machine went away goes back to the queue, at most `pool.retries`
    times; it resumes from its checkpoint)."""

    exp: Experiment
    pool: Launcher
    queue: list
    say: object  # prints one line (off a terminal)
    active: dict = field(default_factory=dict)  # run name -> (run, handle)
    retried: dict = field(default_factory=dict)  # run name -> retries so far

    done: dict = field(default_factory=dict)  # run name -> its status once it ended

    def ready(self):
        """The first queued run whose runs it reads (`after`) have finished; a run whose
        reference failed fails too, naming it."""
        for run in list(self.queue):
            waits = [self.done.get(name, "pending") for name in run.after]
            if any(state in ("failed", "refused") for state in waits):
                self.queue.remove(run)
                run.status = "failed"
                run.error = f"the run it reads failed: {', '.join(run.after)}"
                self.done[run.name] = run.status
                self.say(f"failed {run.name}: {run.error}")
            elif all(state == "done" for state in waits):
                return run
        return None

    def start(self, env: dict) -> None:
        while self.queue and self.pool.free():
            run = self.ready()
            if run is None:
                if not self.active:  # nothing runs that they wait for: a cycle
                    for stuck in self.queue:
                        stuck.status, stuck.error = "failed", (
                            f"waits on runs that never start: {', '.join(stuck.after)}")
                        self.say(f"failed {stuck.name}: {stuck.error}")
                    self.queue.clear()
                return
            self.queue.remove(run)
            run.run_dir.parent.mkdir(parents=True, exist_ok=True)
            handle = self.pool.start(run, env)
            self.active[run.name] = (run, handle)
            run.status, run.started = "running", time.time()
            self.say(f"{resumed_from(run.run_dir)}{run.name}{self.pool.where(handle)}")

    def settle(self) -> None:
        for name, (run, handle) in list(self.active.items()):
            outcome = self.pool.poll(handle)
            if outcome is None:
                continue
            del self.active[name]
            if outcome.lost and self.retried.get(name, 0) < self.pool.retries:
                self.retried[name] = self.retried.get(name, 0) + 1
                run.status = "pending"
                self.queue.insert(0, run)  # resumes from its last checkpoint
                self.say(f"retrying {run.name}: {outcome.lost} (retry {self.retried[name]} "
                         f"of {self.pool.retries})")
                continue
            ok = not outcome.lost and outcome.code == 0 and finished(run.run_dir,
                                                                      self.exp.steps)
            run.status = "done" if ok else "failed"
            self.done[run.name] = run.status
            run.error = "" if ok else outcome.lost or \
                f"exit {outcome.code}: {last_error(run.log)}"
            self.say(f"{run.status} {run.name} ({time.time() - run.started:.0f} s)"
                     + (f": {run.error}" if run.error else ""))

    @property
    def busy(self) -> bool:
        return bool(self.queue or self.active)


def execute(exp: Experiment, runs: list, out: Path, pool: Launcher, *,
            live: bool = True) -> None:
    """Run the pending runs through `pool` (a launcher: `lmpo.experiments.run.launchers`),
    as many at once as it has room for, updating each run's status (`Dispatch`): a run
    whose machine went away runs again, one that exits with an error is reported failed.
    Whatever ends the sweep, `pool.close()` stops what is still running."""
    from rich.console import Console
    from rich.live import Live

    from lmpo.warmstart import PINNED_ENV

    console = Console()
    started = time.time()
    history = out / "sweep.json"
    past = read_history(history)
    record = {"started": started, "wall_s": None, **pool.describe(), "status": "interrupted"}
    write_text(history, json.dumps([*past, record], indent=2) + "\n")  # None if killed
    show = live and console.is_terminal
    env = os.environ | {"PYTHONUNBUFFERED": "1", PINNED_ENV: str((out / WARMSTARTS).absolute())}
    last_rows, shown_at = LastRows(), 0.0
    sweep = Dispatch(exp, pool, start_order(exp, [r for r in runs if r.status == "pending"]),
                     done={r.name: r.status for r in runs if r.status != "pending"},
                     say=(lambda line: None) if show else
                     (lambda line: console.print(line, highlight=False)))
    try:
        with Live(status_table(exp, runs, last_rows), console=console, refresh_per_second=2,
                  transient=False) if show else contextlib.nullcontext() as view:
            while sweep.busy:
                sweep.start(env)
                time.sleep(0.5)
                sweep.settle()
                if show and (time.time() - shown_at >= 2.0 or not sweep.busy):
                    view.update(status_table(exp, runs, last_rows))  # off a terminal: none
                    shown_at = time.time()
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (lmpo.errors.Interrupted)
        record["interrupted"] = "SIGTERM" if isinstance(exc, Interrupted) else "SIGINT"
        for run, _ in sweep.active.values():
            run.status = "interrupted"
        raise
    finally:
        pool.close()  # stops what still runs, at its last checkpoint
        record |= {"wall_s": time.time() - started,
                   "status": {r.name: r.status for r in runs}}
        if sweep.retried:
            record["retried"] = sweep.retried
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
