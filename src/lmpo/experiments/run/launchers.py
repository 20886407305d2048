"""Launchers, as a registry: what starts a sweep's runs, behind one protocol.

`lmpo compare --launcher NAME` (its choices and help read from here) and the sweep
(`lmpo.experiments.run.sweep.compare`) both look a launcher up in `LAUNCHERS`; a new one
is a class with the `Launcher` methods and one registration here. Registration metadata:

- `help`: its line in `lmpo compare --help`;
- `address`: whether it takes `--address` (a cluster);
- `absolute_out`: whether its runs need the sweep's directory as an absolute path (they
  run on other machines, or in other working directories);
- `verl`: how `--engine verl` goes through it (printing verl's commands, or submitting
  each as a job), a function of (exp, config_path, out, *, address, jobs, strict,
  entrypoint) returning the exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from lmpo.experiments.run.launcher import LocalPool, Outcome
from lmpo.registry import Registry

LAUNCHERS = Registry("launcher", defaults={"address": False, "absolute_out": False})
DEFAULT_LAUNCHER = "pool"  # this machine


@runtime_checkable
class Launcher(Protocol):
    """What the sweep asks of a launcher: room for another run, start one (a handle), poll
    a handle (None while it runs, else its `Outcome`), where it runs (a suffix for the
    'started' line), what to record in sweep.json, and stop everything at the end. A run
    whose `Outcome.lost` is set runs again, at most `retries` times."""

    name: str
    retries: int

    def free(self) -> bool: ...

    def start(self, run, env: dict) -> Any: ...

    def poll(self, handle) -> Outcome | None: ...

    def where(self, handle) -> str: ...

    def describe(self) -> dict: ...

    def close(self) -> None: ...


def print_verl(exp, config_path: str, out: str | None, *, address: str | None, jobs: int,
               strict: bool, entrypoint: str) -> int:
    """`--engine verl` on this machine: print verl's command per arm x seed (and with
    `out`, write verl.sh and the plan)."""
    from lmpo.experiments.engines.verl_launch import print_verl_sweep

    return print_verl_sweep(exp, config_path, out, strict=strict, entrypoint=entrypoint)


def submit_verl(exp, config_path: str, out: str | None, *, address: str | None, jobs: int,
                strict: bool, entrypoint: str) -> int:
    """`--engine verl --launcher ray`: each verl launch submitted as a Ray job."""
    from lmpo.experiments.engines.verl_jobs import submit_verl_sweep

    return submit_verl_sweep(exp, config_path, out, address=address, jobs=jobs,
                             strict=strict, entrypoint=entrypoint)


@LAUNCHERS.register("pool", help="this machine: at most --jobs runs at once", verl=print_verl)
def pool(*, jobs: int, out: Path, address: str | None = None) -> Launcher:
    return LocalPool(jobs)


@LAUNCHERS.register("ray", help="a Ray task per run, --jobs per node (docs/cluster.md)",
                    address=True, absolute_out=True, verl=submit_verl)
def ray(*, jobs: int, out: Path, address: str | None = None) -> Launcher:
    from lmpo.experiments.run.ray_launcher import RayPool

    return RayPool(jobs, out, address=address)


def build_launcher(name: str, *, jobs: int, out: Path, address: str | None = None
                   ) -> Launcher:
    """The launcher `name` for a sweep of `jobs` runs at once into `out`."""
    return LAUNCHERS.get(name, jobs=jobs, out=out, address=address)()


def launcher_help() -> str:
    """The --launcher option's help: each launcher's line."""
    return "; ".join(f"{name}: {LAUNCHERS.meta(name)['help']}" for name in LAUNCHERS.names())


def check_address(name: str, address: str | None) -> None:
    """A ConfigError where `--address` is given to a launcher that takes none."""
    from lmpo.errors import ConfigError

    if address and not LAUNCHERS.meta(name)["address"]:
        takes = [n for n in LAUNCHERS.names() if LAUNCHERS.meta(n)["address"]]
        raise ConfigError(f"--address is for --launcher {' or '.join(takes)}")
