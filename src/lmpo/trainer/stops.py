"""A stop that loses no finished step: Ctrl-C or SIGTERM during a run lets the step in
progress finish, writes a checkpoint at that step boundary and then stops, so a rerun with
`--resume` goes on from the next step (without it a run stopped between checkpoints would
restart from the last one, up to `log.checkpoint_every` steps earlier).

A second Ctrl-C stops at once (the step in progress is lost, the last checkpoint kept). A
SIGTERM while a stop is pending is the same stop (a sweep that stops its runs sends one
after the terminal's Ctrl-C already reached them). Outside the main thread, where
handlers cannot be set, the signals act as before.
"""

from __future__ import annotations

import signal
import sys
import threading

from lmpo.errors import Interrupted


class StepEndStop:
    """From `install()` to `restore()`: records the first SIGINT/SIGTERM; `pending` says
    whether the loop should stop after this step, `stop(step)` stops it as asked."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __init__(self):
        self.previous, self.caught = {}, None

    def install(self) -> StepEndStop:
        """Handle both signals, except one the process ignores (a `nohup` run ignores
        SIGINT and keeps ignoring it)."""
        if threading.current_thread() is threading.main_thread():
            for name in self.SIGNALS:
                sig = getattr(signal, name)
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, sig, frame) -> None:
        if self.caught is None:
            self.caught = sig
            print("lmpo train: stopping after the step in progress (its checkpoint is "
                  "written first); Ctrl-C again stops at once", file=sys.stderr, flush=True)
        elif sig == signal.SIGINT:  # a second Ctrl-C: now
            self.raise_for(sig)

    @property
    def pending(self) -> bool:
        return self.caught is not None

    def raise_for(self, sig) -> None:
        if sig == signal.SIGTERM:
            raise Interrupted(f"signal {int(sig)}")
        raise KeyboardInterrupt

    def stop(self, step: int) -> None:
        print(f"lmpo train: stopped at the end of step {step}, checkpoint written",
              file=sys.stderr, flush=True)
        self.raise_for(self.caught)

    def restore(self) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        self.previous = {}
