"""Checkers that may hang (math-verify's sympy), run under a wall-clock timeout.

`math-verify`'s own timeouts use `signal.alarm`, which works only in a process's
main thread: called from a data-loader thread or a Ray worker's thread it either
raises or never times out. lmpo therefore runs the checker in a persistent worker
process, `python -m lmpo.rewards.worker NAME`, talking JSON lines over its stdin and
stdout (no multiprocessing: nothing depends on how the caller's `__main__` is written),
and waits at most `timeout` seconds per sample. A sample that runs over scores 0 and is
counted; the wedged worker is killed and a fresh one started for the next sample.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lmpo.errors import UnknownName
from lmpo.processes import read_reply

TIMEOUT_S = 5.0
STARTUP_S = 60.0  # the worker imports the checker once


def _verify_one(gold: str, completion: str) -> float:
    from math_verify import parse, verify

    gold_parsed = parse(gold if "$" in gold or "\\" in gold else f"${gold}$")
    answer = parse(completion)
    return float(bool(gold_parsed) and bool(answer) and verify(gold_parsed, answer))


def _sleep_then(seconds: str, value: str) -> float:  # test hook: a checker that hangs
    import time

    time.sleep(float(seconds))
    return float(value)


CHECKERS = {"math_verify": _verify_one, "sleep": _sleep_then}


def serve(name: str) -> None:
    """The worker: one JSON list of arguments per stdin line, one JSON reply per line."""
    check = CHECKERS[name]
    if name == "math_verify":
        import math_verify  # noqa: F401  (imported before "ready": not charged to a sample)
    out = sys.stdout
    out.write(json.dumps(["ready", None]) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            reply = ["ok", check(*json.loads(line))]
        except Exception as exc:  # a checker error is that sample's 0, reported
            reply = ["error", f"{type(exc).__name__}: {exc}"]
        out.write(json.dumps(reply) + "\n")
        out.flush()


class GuardedWorker:
    """A checker (`CHECKERS` name) in its own process with a per-call timeout."""

    def __init__(self, name: str = "math_verify", timeout: float = TIMEOUT_S):
        if name not in CHECKERS:
            raise UnknownName(f"unknown checker {name!r}; valid: {', '.join(CHECKERS)}")
        self.name, self.timeout = name, timeout
        self.timeouts = self.errors = 0
        self._proc: subprocess.Popen | None = None

    def _start(self) -> None:
        env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen([sys.executable, "-m", "lmpo.rewards.worker", self.name],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                      text=True, bufsize=1)
        if self._read(STARTUP_S) is None:
            self._kill()
            raise RuntimeError(f"the {self.name} checker worker did not start within "
                               f"{STARTUP_S:.0f} s")

    def _read(self, timeout: float):
        try:
            return read_reply(self._proc, timeout)
        except EOFError:
            raise RuntimeError(f"the {self.name} checker worker exited "
                               f"(code {self._proc.poll()})") from None

    def _kill(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __call__(self, *args: str) -> float:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        self._proc.stdin.write(json.dumps(list(args)) + "\n")
        self._proc.stdin.flush()
        reply = self._read(self.timeout)
        if reply is None:
            self.timeouts += 1
            self._kill()
            return 0.0
        status, value = reply
        if status == "error":
            self.errors += 1
            return 0.0
        return float(value)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        self._kill()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_WORKER: GuardedWorker | None = None


def math_verify_batch(prompts, completions, answers, **meta) -> list[float]:
    """`reward.fn: math_verify`: 1 if the completion's answer is mathematically equal to
    the gold answer (math-verify), else 0; each sample guarded by a 5 s timeout."""
    global _WORKER
    if _WORKER is None:
        _WORKER = GuardedWorker("math_verify")
    return [_WORKER(a, c) for c, a in zip(completions, answers, strict=True)]

