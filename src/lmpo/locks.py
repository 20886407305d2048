"""One lmpo process per run or sweep directory: an exclusive lock held while it works.

`directory_lock(dir)` takes an exclusive `flock` on `dir/.lock` (created, with the
directory, on first use) and writes the holder into it: pid, host, start time and what it
is doing. A second `lmpo train` or `lmpo compare` on a directory in use fails at once with
one line naming the holder. The lock is the kernel's: it dies with its process however the
process ends, so a lock whose holder was killed is taken over, with a notice naming the
holder that is gone. A holder that finishes clears the file.

`flock` is per machine: on a network file system whose mount does not pass locks
through, two hosts would not see each other's locks (the holder line names its host).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from lmpo.errors import LeaseLost, LockedError

LOCK_FILE = ".lock"


def describe(holder: dict) -> str:
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.get("started", 0)))
    return (f"{holder.get('what', 'lmpo')}, pid {holder.get('pid', '?')} on "
            f"{holder.get('host', '?')} since {started}")


def _holder(fh) -> dict:
    fh.seek(0)
    text = fh.read().strip()
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {"what": f"an unreadable lock ({text[:40]!r})"}


def _written_holder(fh, wait_s: float = 2.0) -> dict:
    """The holder of a lock another process has just taken: it writes its line right after
    taking the lock, so an empty file is read again for up to `wait_s` (two processes
    started together would otherwise name the holder "pid ?")."""
    deadline = time.monotonic() + wait_s
    holder = _holder(fh)
    while not holder and time.monotonic() < deadline:
        time.sleep(0.02)
        holder = _holder(fh)
    return holder


def notice_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def directory_lock(directory: str | Path, *, what: str,
                   notice=notice_stderr) -> Iterator[Path]:
    """Hold `directory`'s lock for the block; LockedError if another process holds it."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fh = open(directory / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 (held open)
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise LockedError(f"{directory} is in use by another lmpo process "
                              f"({describe(_written_holder(fh))}): wait for it to end, or "
                              "use another directory") from None
        previous = _holder(fh)
        if previous:
            notice(f"lmpo: {directory}: took over the lock of {describe(previous)}, which "
                   "ended without releasing it")
        fh.seek(0)
        fh.truncate()
        fh.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                             "started": time.time(), "what": what}) + "\n")
        fh.flush()
        try:
            yield directory
        finally:
            fh.seek(0)
            fh.truncate()  # a clean end leaves no holder behind
            fh.flush()
            fcntl.flock(fh, fcntl.LOCK_UN)
    finally:
        fh.close()


# ------------------------------------------------ leases with a fencing token
# flock holds within one machine. A sweep whose runs move between machines (a Ray
# cluster: lmpo.experiments.run.ray_launcher) hands each attempt of a run a lease: the number
# in `run_dir/.lease`, one more than the last attempt's, given to the writer in LMPO_LEASE.
# A writer whose number is no longer the file's (its node was cut off and the run moved on)
# stops before writing. Without LMPO_LEASE (a local run) there is no check.
LEASE_FILE = ".lease"
LEASE_ENV = "LMPO_LEASE"


def read_lease(directory: str | Path) -> dict:
    path = Path(directory) / LEASE_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"token": 0}


def grant_lease(directory: str | Path, holder: str) -> int:
    """A new lease on `directory` for `holder` (e.g. a node's name): the next token, written
    atomically. Only the sweep's driver grants leases, one at a time."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    token = int(read_lease(directory).get("token", 0)) + 1
    tmp = directory / f"{LEASE_FILE}.tmp"
    tmp.write_text(json.dumps({"token": token, "holder": holder, "granted": time.time()}) + "\n")
    os.replace(tmp, directory / LEASE_FILE)
    return token


def check_lease(directory: str | Path) -> None:
    """LeaseLost if this process was given a lease (LMPO_LEASE) that is no longer
    `directory`'s: a newer attempt of the run holds it."""
    mine = os.environ.get(LEASE_ENV)
    if not mine:
        return
    current = read_lease(directory)
    if int(current.get("token", 0)) != int(mine):
        raise LeaseLost(f"{directory}: this writer's lease (token {mine}) was handed to "
                        f"{current.get('holder', '?')} (token {current.get('token')}); "
                        "stopping before writing")
