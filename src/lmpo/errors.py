"""The errors lmpo reports as one line, without a traceback.

Every exception raised for something the user gave (a config, a data file, a reward
function, a checkpoint, an experiment file) or for a state of the machine the user can act
on (a directory in use, a disk that is full) derives from `LmpoError`; the command line
prints its message on one line and exits with its `exit_code` (2: the input cannot be
used, nothing was done; 1: the run started and stopped, the message says how to go on).
Anything else is a bug in lmpo and keeps its traceback.
"""

import os
import signal
import threading


class LmpoError(Exception):
    """An error whose message is the whole story: it names what to fix."""

    exit_code = 2

    def __str__(self) -> str:  # one line, whatever the message was built from
        return " ".join(str(self.args[0] if self.args else "").split("\n"))


class ConfigError(LmpoError, ValueError):
    """A config, preset or setting that cannot be used; the message names it."""


class UnknownName(ConfigError, KeyError):
    """A name no registry, task list or tier list holds; the message lists the valid ones.
    A KeyError too, as the registries' contract says."""


class BadHyperParameter(ConfigError, TypeError):
    """A hyper-parameter a method does not take; the message lists the ones it does."""


class OutOfDomain(ConfigError):
    """A hyper-parameter value outside its declared domain; names the key and the domain."""


class DataError(LmpoError, ValueError):
    """A malformed data line; the message names the file and the line number."""


class LockedError(LmpoError):
    """A run or sweep directory another lmpo process is using; names the holder."""


class LeaseLost(LockedError):
    """A run's writer whose lease a newer writer holds (lmpo.locks.check_lease)."""


class RunError(LmpoError, RuntimeError):
    """A run that started stopped for a reason the user can act on (a write that failed,
    updates that kept going non-finite); the message says from where it can go on."""

    exit_code = 1


class Interrupted(KeyboardInterrupt):
    """SIGTERM, raised where Python raises KeyboardInterrupt for SIGINT (so whatever stops
    its work on Ctrl-C stops it the same way): the command line prints one line and exits
    143 (128 + SIGTERM), as it exits 130 on SIGINT."""


def on_sigterm(signum, frame):
    raise Interrupted(f"signal {signum}")


class deferred_stops:
    """Hold Ctrl-C and SIGTERM while a short write finishes, then stop as they asked.

    torch's zip writer turns an exception raised inside its write callback (where Python
    delivers a signal) into a RuntimeError ("unexpected pos"), so a stop that lands mid-
    checkpoint would read as a failed write and lose the checkpoint. Inside this block the
    two signals are only recorded; on leaving it the previous handlers are put back and the
    first recorded signal is delivered to them (raising KeyboardInterrupt or `Interrupted`).
    Outside the main thread, where handlers cannot be set, it does nothing."""

    SIGNALS = ("SIGINT", "SIGTERM")

    def __enter__(self):
        self.previous, self.caught = {}, []
        if threading.current_thread() is not threading.main_thread():
            return self
        for name in self.SIGNALS:
            sig = getattr(signal, name)
            self.previous[sig] = signal.signal(sig, lambda s, f: self.caught.append(s))
        return self

    def __exit__(self, *exc_info):
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if not self.caught or exc_info[0] is not None:
            return False
        sig = self.caught[0]
        handler = self.previous[sig]
        if callable(handler):
            handler(sig, None)  # raises, as it would have mid-write
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), sig)  # the default action, now that the write is whole
        return False
