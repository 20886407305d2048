"""How a run's process is configured: the torch thread counts, the CPUs it may run on and
the environment variables that steer the numerical libraries. `lmpo train` writes it once
per start to the run's `process.json`, so a launcher (the local pool, Ray, a scheduler)
can be checked to start a run as another would, by reading rather than timing."""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path

# The variables torch, OpenMP, MKL, OpenBLAS and the other BLAS builds read when they load:
# what a launcher must hand a run as the user's shell had them.
THREAD_PREFIXES = ("OMP_", "MKL_", "KMP_", "GOMP_", "OPENBLAS_", "BLIS_", "NVPL_",
                   "VECLIB_", "NUMEXPR_", "TORCH_", "PYTORCH_")
PROCESS_FILE = "process.json"


def thread_env(env: dict | None = None) -> dict:
    """The entries of `env` (default: this process's) that set threads or BLAS behaviour."""
    env = os.environ if env is None else env
    return {k: env[k] for k in sorted(env) if k.startswith(THREAD_PREFIXES)}


def affinity() -> list[int] | None:
    """The CPUs this process may run on (None where the platform cannot say)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's count."""
    cpus = affinity()
    return len(cpus) if cpus else os.cpu_count() or 1


def others_running(samples: int = 5, gap_s: float = 0.02) -> float | None:
    """How many other threads are running now: the kernel's count of runnable tasks
    (/proc/loadavg's fourth field) less this one, the least of a few samples (a short
    burst elsewhere is not a busy core); the 1-minute load average where there is no
    /proc. None where neither can be read."""
    import time

    seen = []
    for _ in range(samples):
        try:
            running = Path("/proc/loadavg").read_text().split()[3].split("/")[0]
        except (OSError, IndexError):
            break
        seen.append(max(0, int(running) - 1))
        time.sleep(gap_s)
    if seen:
        return float(min(seen))
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def busy_warning(threads: int, load: float | None = None) -> str | None:
    """One line where other work (`others_running`, or `load`) leaves fewer free cores
    than `threads`, else None. Such a team waits at every barrier for the thread that
    shares its core: a step can take several times longer."""
    if threads <= 1:
        return None
    load = others_running() if load is None else load
    if load is None:
        return None
    cores = usable_cores()
    free = cores - load
    if free >= threads - 0.5:
        return None
    sleeping = " (OpenMP's idle threads sleep rather than spin)" \
        if os.environ.get("OMP_WAIT_POLICY") == "PASSIVE" else ""
    return (f"lmpo: other work keeps about {load:.1f} of {cores} cores busy, leaving "
            f"about {max(free, 0.0):.1f} for {threads} torch threads{sleeping}; steps may run "
            "slower than with threads=1 (--threads 1 for lmpo eval)")


def adapt_waits(env=None) -> bool:
    """Before torch loads: where other work keeps a core busy now, make OpenMP's idle
    threads sleep (`OMP_WAIT_POLICY=PASSIVE`) instead of spinning at every barrier for the
    thread that shares its core; True if it did. Measured on the 2-core testbed machine
    beside one busy core (benchmarks/results/busy_threads*.json), 20 nano steps at 2
    threads took 33.9 s spinning and 18.8 s passive (17.7 s at 1 thread); alone passive
    costs (22.1 s against 12.4), so it is chosen only when busy. It changes scheduling, not
    results. Left alone where the user set a policy, where torch is already loaded or on
    one core."""
    import sys

    env = os.environ if env is None else env
    if "OMP_WAIT_POLICY" in env or "torch" in sys.modules or usable_cores() < 2:
        return False
    others = others_running()
    if others is None or others < 0.5:
        return False
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return True


def set_torch_threads(threads: int) -> int:
    """Set torch's intra-op threads to `threads`, at most the usable cores, and say in one
    line (stderr) when other work leaves fewer free cores (`busy_warning`); the count set."""
    import sys

    import torch

    torch.set_num_threads(min(threads, usable_cores()))
    warning = busy_warning(torch.get_num_threads())
    if warning:  # a team larger than the free cores spins at its barriers
        print(warning, file=sys.stderr, flush=True)
    return torch.get_num_threads()


def describe() -> dict:
    """This process's threads, CPUs and thread environment (see the module docstring)."""
    import torch

    return {"host": socket.gethostname(), "pid": os.getpid(), "cpu_count": os.cpu_count(),
            "affinity": affinity(), "nice": os.nice(0) if hasattr(os, "nice") else None,
            "torch_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
            "env": thread_env(), "python": platform.python_version(),
            "torch": torch.__version__}


def write(run_dir: str | Path) -> dict:
    """Write `describe()` to the run's `process.json` (each start replaces the last)."""
    from lmpo.atomic import write_text

    info = describe()
    write_text(Path(run_dir) / PROCESS_FILE, json.dumps(info, indent=1) + "\n")
    return info


def comparable(info: dict) -> dict:
    """The part of a `process.json` two launchers on one machine must agree on."""
    return {k: info[k] for k in ("cpu_count", "affinity", "nice", "torch_threads",
                                 "torch_interop_threads", "env")}


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), or what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"
