"""Start a sweep's `lmpo train` runs from a warm process.

A fresh interpreter spends most of a short run importing torch, transformers and the
task libraries (~10 s on 2 cores), and a sweep pays it once per run. On Linux, `lmpo
compare` instead keeps a fork server that has imported lmpo's trainer once (it runs no
tensor work, so its children start with no thread pools to inherit) and forks each run
from it. A child is an ordinary `lmpo train` process in every other way: its own process,
the sweep's environment and working directory, its output in the run's log, its exit
code, the parent-death signal (`kill -9` of the sweep leaves nothing running); the run
itself is the same command that `lmpo compare --list` prints. `LMPO_FRESH_PROCESSES=1`, or
a platform without fork, starts every run as a fresh interpreter instead.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from lmpo.processes import die_with_parent

FRESH_ENV = "LMPO_FRESH_PROCESSES"
STOP_GRACE_S = 180.0  # how long a stopped run may take to finish its step and exit
PRELOAD = ["lmpo.cli", "lmpo.trainer.loop"]  # the trainer brings the models, tasks, rewards
_CONTEXT = None


def forking() -> bool:
    """Fork runs unless told not to, where this Python's fork server can be made to die
    with the sweep (see `release_server`)."""
    from multiprocessing import forkserver

    return os.environ.get(FRESH_ENV, "") in ("", "0") and \
        "forkserver" in multiprocessing.get_all_start_methods() and \
        hasattr(forkserver._forkserver, "_forkserver_alive_fd")


def release_server() -> None:  # pragma: no cover - runs in the child
    """Close the child's copy of the fork server's keep-alive pipe. Python hands one to every
    forked child, so the server lives while any child does, and a child whose parent-death
    signal is tied to the server would outlive a killed sweep. Without it the server exits
    as soon as the sweep does (the pipe's last writer), and its children get the signal."""
    from multiprocessing import forkserver

    fd = forkserver._forkserver._forkserver_alive_fd
    if fd is not None:
        os.close(fd)
        forkserver._forkserver._forkserver_alive_fd = None


def context():
    """The fork server's context, started on first use and kept for this process."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


def _run(argv: list[str], log: str, env: dict, cwd: str) -> None:  # pragma: no cover - child
    die_with_parent()
    release_server()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - the child's own
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    code = 0
    try:
        import runpy

        sys.argv = ["lmpo", *argv]
        runpy.run_module("lmpo", run_name="__main__", alter_sys=True)  # `python -m lmpo`
    except SystemExit as exc:  # as the interpreter reads it: None 0, a message 1
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reported in the run's log, like an interpreter's
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)  # multiprocessing runs the child's finalizers, then exits with `code`


class Forked:
    """A forked run with the part of `subprocess.Popen` the sweep uses."""

    def __init__(self, argv: list[str], log: Path, env: dict, cwd: str | None = None):
        self.process = context().Process(target=_run,
                                         args=(argv, str(log), env, cwd or os.getcwd()),
                                         daemon=False)
        self.process.start()
        self.pid = self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self) -> int | None:
        self.process.join()
        return self.process.exitcode


def start(command: list[str], log: Path, env: dict, cwd: str | None = None):
    """Start `command` (`python -m lmpo train ...`) with its output appended to `log`, in
    `cwd` (default: this process's): forked from the warm server where it can be, else as
    a fresh interpreter."""
    lmpo_train = command[1:4] == ["-m", "lmpo", "train"]
    if lmpo_train and forking():
        return Forked(command[3:], log, env, cwd)
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                cwd=cwd, preexec_fn=die_with_parent)


@dataclass
class Outcome:
    """How a run's process ended: its exit code, or `lost` (why the machine it ran on went
    away, so that it may run again elsewhere)."""

    code: int | None
    lost: str = ""


class LocalPool:
    """`lmpo compare`'s default launcher: at most `jobs` runs at once on this machine,
    each started by `start` (forked from the warm server where it can be). Its runs die
    with the sweep; nothing is retried (a run that failed here would fail again)."""

    name, retries = "pool", 0

    def __init__(self, jobs: int):
        self.jobs, self.running = jobs, set()

    def free(self) -> bool:
        return len(self.running) < self.jobs

    def start(self, run, env: dict):
        proc = start(run.command(), run.log, env)
        self.running.add(proc)
        return proc

    def poll(self, proc) -> Outcome | None:
        code = proc.poll()
        if code is None:
            return None
        self.running.discard(proc)
        return Outcome(code)

    def where(self, proc) -> str:
        return ""

    def describe(self) -> dict:
        return {"launcher": self.name, "jobs": self.jobs}

    def close(self, grace_s: float = STOP_GRACE_S) -> None:
        """Stop the runs still going (a sweep stopped by Ctrl-C or SIGTERM): SIGTERM, on
        which a run finishes the step in progress, checkpoints it and exits 143
        (lmpo.trainer.stops); SIGKILL for one still alive after `grace_s`. A stopped run
        resumes after the step it stopped at."""
        procs = [p for p in self.running if p.poll() is None]
        for proc in procs:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        for proc in procs:
            while proc.poll() is None and time.time() < deadline:
                time.sleep(0.05)
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        self.running.clear()
