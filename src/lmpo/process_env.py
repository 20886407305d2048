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
