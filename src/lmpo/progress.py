"""Progress of a long loop, on a terminal and off one.

On a terminal, a rich live bar. Off one (a log file, Slurm, nohup, the per-run logs of
`lmpo compare`) a live bar draws nothing until it ends, so a plain line is printed
instead: at the first step, then every `every_s` seconds or 5% of the steps, whichever
comes first, and at the end; each line gives the step, the elapsed time, an ETA and the
loop's fields:

    train ppo_clip/grpo: step 40/300 (13%), 1m12s elapsed, ETA 7m48s, reward 0.412 acc 0.38

`fmt` is a format string over the loop's fields (`"reward {reward:.3f}"`), used for both.
"""

from __future__ import annotations

import re
import sys
import time


def duration(seconds: float) -> str:
    """1h02m, 3m07s, 12s."""
    s = int(round(max(seconds, 0.0)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class LoopProgress:
    """`update(completed=..., **fields)` or `update(advance=1, **fields)` after each step;
    `start()`/`stop()` or a `with` block. `enabled=False` shows nothing."""

    def __init__(self, label: str, fmt: str, total: int, *, completed: int = 0,
                 enabled: bool = True, every_s: float = 30.0, stream=None, terminal=None,
                 **fields):
        self.label, self.fmt, self.total, self.completed = label, fmt, total, completed
        self.enabled, self.every_s, self.fields = enabled, every_s, fields
        self.stream = stream or sys.stdout
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.first = completed  # steps done before this invocation (a resumed run)
        self._bar = self._job = None
        self._started = self._last_time = None
        self._last_step = completed

    def start(self) -> LoopProgress:
        self._started = self._last_time = time.perf_counter()
        if self.enabled and self.terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            rich_fmt = re.sub(r"\{(\w+)", r"{task.fields[\1]", self.fmt)
            self._bar = Progress(TextColumn(f"[bold]{self.label}"), BarColumn(),
                                 TextColumn("{task.completed}/{task.total} " + rich_fmt),
                                 TimeElapsedColumn())
            self._job = self._bar.add_task(self.label, total=self.total,
                                           completed=self.completed, **self.fields)
            self._bar.start()
        return self

    def update(self, *, advance: int = 0, completed: int | None = None, **fields) -> None:
        self.completed = completed if completed is not None else self.completed + advance
        self.fields |= fields
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._job, completed=self.completed, **fields)
            return
        now = time.perf_counter()
        due = (self.completed - self._last_step >= max(1, self.total // 20)
               or now - self._last_time >= self.every_s
               or self._last_step == self.first or self.completed >= self.total)
        if due:
            self._last_time, self._last_step = now, self.completed
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        elapsed = (now or time.perf_counter()) - self._started
        done = self.completed - self.first
        left = self.total - self.completed
        eta = f", ETA {duration(elapsed / done * left)}" if done > 0 and left > 0 else ""
        share = f" ({100 * self.completed // max(self.total, 1)}%)"
        try:
            shown = self.fmt.format(**self.fields)
        except (KeyError, ValueError):  # a field not given yet
            shown = ""
        return (f"{self.label}: step {self.completed}/{self.total}{share}, "
                f"{duration(elapsed)} elapsed{eta}" + (f", {shown}" if shown else ""))

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> LoopProgress:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
