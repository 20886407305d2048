"""A user's reward function (`reward.fn: path/to/file.py:function`) in its own process,
so that one that hangs can be stopped: `reward.timeout_s` (default `DEFAULT_TIMEOUT_S`)
bounds each call; over it, the worker is killed (a fresh one starts for the next call)
and the call raises `RewardTimeout`. `reward.timeout_s: null` calls the function in the
trainer's own process instead, without a limit (as TRL does).

The worker (`serve(FILE, FUNCTION)` in a fresh interpreter) imports the file once,
then reads one JSON request per line on stdin and writes one JSON reply per line on a
private copy of its stdout; what the function prints goes to stderr (the run's log), so
it cannot corrupt the replies. It dies with the process that started it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lmpo.errors import LmpoError
from lmpo.processes import die_with_parent, read_reply

DEFAULT_TIMEOUT_S = 300.0
ENTRY = "import sys; from lmpo.reward_worker import serve; serve(*sys.argv[1:3])"
STARTUP_S = 120.0  # the worker imports the user's file once


class RewardTimeout(LmpoError, TimeoutError):
    """A reward function that did not return within reward.timeout_s."""


class RewardFailed(Exception):
    """The user's function raised in the worker: its type and message."""


class Unconvertible(str):
    """A returned value that is not a number or None, shown as the function returned it."""

    def __repr__(self) -> str:
        return str(self)


def _plain(value):
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return {"repr": repr(value)[:200]}


def serve(path: str, name: str) -> None:  # pragma: no cover - runs in the worker
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the function's prints go to the log, not into the replies
    sys.stdout = sys.stderr
    try:
        from lmpo.user_modules import import_user_modules

        (module,) = import_user_modules([path], what=f"reward.fn '{path}:{name}'")
        fn = getattr(module, name)
    except BaseException as exc:  # noqa: BLE001 - reported to the trainer in one line
        replies.write(json.dumps(["import_error", str(exc)]) + "\n")
        return
    replies.write(json.dumps(["ready", None]) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        try:
            out = fn(request["prompts"], request["completions"], request["answers"],
                     **request["meta"])
            reply = ["ok", [_plain(x) for x in out] if isinstance(out, list | tuple)
                     else {"repr": repr(out)[:200]}]
        except BaseException as exc:  # noqa: BLE001 - that call's error, the worker goes on
            reply = ["error", f"{type(exc).__name__}: {exc}"]
        replies.write(json.dumps(reply) + "\n")


class UserFunctionWorker:
    """Calls `path:name` in a worker process, each call bounded by `timeout_s`."""

    def __init__(self, path: str, name: str, timeout_s: float):
        self.path, self.name, self.timeout_s = path, name, timeout_s
        self._proc: subprocess.Popen | None = None

    @property
    def spec(self) -> str:
        return f"{self.path}:{self.name}"

    def _start(self) -> None:
        env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc = subprocess.Popen(
            [sys.executable, "-c", ENTRY, self.path, self.name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1,
            preexec_fn=die_with_parent)
        reply = self._read(STARTUP_S)
        if reply is None:
            self.close()
            raise RewardTimeout(f"reward function {self.spec}: its file did not import within "
                                f"{STARTUP_S:.0f} s")
        if reply[0] == "import_error":
            self.close()
            raise LmpoError(f"reward function {self.spec}: {reply[1]}")

    def _read(self, timeout: float):
        try:
            return read_reply(self._proc, timeout)
        except EOFError:
            code = self._proc.wait()
            self._proc = None
            raise LmpoError(f"reward function {self.spec}: its worker process exited (code "
                            f"{code}; the function or its file ended the process: os._exit, "
                            "a crash in native code?)") from None

    def __call__(self, prompts, completions, answers, **meta) -> list:
        if self._proc is None or self._proc.poll() is not None:
            self._start()
        self._proc.stdin.write(json.dumps({"prompts": list(prompts),
                                           "completions": list(completions),
                                           "answers": list(answers), "meta": meta}) + "\n")
        self._proc.stdin.flush()
        reply = self._read(self.timeout_s)
        if reply is None:
            self.close()
            raise RewardTimeout(f"reward function {self.spec} did not return within "
                                f"reward.timeout_s = {self.timeout_s:g} s")
        status, value = reply
        if status == "error":
            raise RewardFailed(value)
        if isinstance(value, dict):
            return Unconvertible(value["repr"])  # type: ignore[return-value]
        return [Unconvertible(v["repr"]) if isinstance(v, dict) else v for v in value]

    def close(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - at interpreter exit
            pass
