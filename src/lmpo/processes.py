"""Child processes that die with the process that started them."""

from __future__ import annotations


def die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    """Linux: the child gets SIGKILL when its parent dies (PR_SET_PDEATHSIG), so `kill -9`
    of a sweep, a run or a trainer leaves none of its workers running; elsewhere nothing."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
