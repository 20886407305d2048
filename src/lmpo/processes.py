"""Child processes that die with the process that started them, and the JSON-lines reply
reader the worker processes (a guarded checker, a user's reward function) share."""

from __future__ import annotations

import json
import select


def die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """Linux: the child gets SIGKILL when its parent dies (PR_SET_PDEATHSIG), so `kill -9`
    of a sweep, a run or a trainer leaves none of its workers running; elsewhere nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def read_reply(proc, timeout: float):
    """The next JSON line on `proc`'s stdout, or None after `timeout` seconds; EOFError
    when the process closed its stdout (it exited)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        return None
    line = proc.stdout.readline()
    if not line:
        raise EOFError
    return json.loads(line)
