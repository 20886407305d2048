"""`lmpo compare --launcher ray`: the sweep's runs as Ray tasks across a cluster's nodes.

Each pending run becomes one Ray task that runs, on the node it is placed on, the same
`python -m lmpo train ... --resume` command the local pool runs, with `threads=` that
node's CPUs / `--jobs` (as the pool sets it from this machine's cores). `--jobs` is runs
at once per node. The driver places every task itself (Ray's node-affinity strategy, not
soft): a node gets at most `jobs` runs, the least busy node first, and each task asks Ray
for `threads` CPUs (and a GPU when the run's `device` is cuda, or auto on a node with one).

- **Shared storage.** The run directories must be one file system every node sees. Before
  anything starts, a probe task on each node reads a file the driver wrote under `--out`
  and writes one back; a node that cannot fails the sweep with one line naming the node
  and the path. A node that mounts the storage elsewhere sets `LMPO_PATH_MAP` in its
  environment (`DRIVER_PREFIX=NODE_PREFIX`, several separated by `;`): every path the
  driver hands the node is rewritten with it.
- **Faults.** A task whose node dies (or whose process a signal killed) is retried on a
  node still alive, at most `RETRIES` times; `lmpo train --resume` continues it from its
  last checkpoint. A run that exits with an error (a bad config) is reported failed once.
  Each attempt gets a lease with a fencing token (`lmpo.locks.grant_lease`): a writer
  cut off from the driver but still alive finds its token stale and stops before its
  next write, so a run never has two writers.
- **The run's process.** A run started by Ray is configured as the pool would start it on
  that node: Ray runs its workers at niceness 15 (its `worker_niceness`), where a run gets
  a few per cent of a CPU beside any other busy process, so the Ray this starts runs them
  at the driver's niceness, and on a cluster (`--address`) each run takes the driver's
  niceness where the node lets it (root, or `RAY_worker_niceness=0` when the node was
  started); a node where it cannot is named in one warning before the sweep starts. The
  driver's thread settings (`OMP_*`, `MKL_*`, `KMP_*`, ... : `lmpo.process_env`) replace
  the worker's, so the `OMP_NUM_THREADS` Ray sets for its tasks does not reach the run
  unless the driver's shell set it. Each run records what it got in its `process.json`.
- **Stopping.** Ctrl-C or `kill` (SIGTERM) of the driver cancels its tasks (their `lmpo
  train` processes die with their Ray workers) and leaves every run directory resumable;
  with no `--address`, the local Ray the driver started is stopped too.

Ray is an optional dependency (`pip install 'lmpo[ray]'`), imported only here.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lmpo.errors import ConfigError, LmpoError, on_sigterm
from lmpo.experiments.run.launcher import Outcome, start
from lmpo.locks import LEASE_ENV, grant_lease
from lmpo.process_env import thread_env

PROBE_TIMEOUT_S = 300  # a node's first worker starts Python and imports lmpo

PATH_MAP_ENV = "LMPO_PATH_MAP"
RETRIES = 3  # attempts after the first that a run whose node went away gets
FORWARDED = ("PYTHONUNBUFFERED", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")  # and LMPO_*


def node_path(path: str, mapping: str | None = None) -> str:
    """`path` as this node sees it, through `LMPO_PATH_MAP` (or `mapping`): the first
    `DRIVER_PREFIX=NODE_PREFIX` whose prefix starts the path rewrites it."""
    mapping = os.environ.get(PATH_MAP_ENV, "") if mapping is None else mapping
    for pair in filter(None, (p.strip() for p in mapping.split(";"))):
        src, sep, dst = pair.partition("=")
        if not sep:
            raise ConfigError(f"{PATH_MAP_ENV} entry {pair!r}: expected DRIVER_PREFIX=NODE_PREFIX")
        src = src.rstrip("/")
        if path == src or path.startswith(src + "/"):
            return dst.rstrip("/") + path[len(src):]
    return path


def take_niceness(nice: int) -> int:
    """On a node: set this worker's niceness (and so its runs') to `nice`, the driver's,
    where the node allows it; returns the niceness it has now."""
    if os.nice(0) != nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except OSError:  # lowering it needs root or RAY_worker_niceness when Ray started
            pass
    return os.nice(0)


def probe(out: str, token: str, nice: int = 0) -> tuple[str, str, int]:
    """On a node: ('', view, niceness) if it reads the driver's token file under `out` and
    writes its own; else (the error, view, niceness). `view` is `out` as the node sees it;
    `niceness` the one its runs would get, asked for the driver's `nice`."""
    view = node_path(out)
    got_nice = take_niceness(nice)
    try:
        got = (Path(view) / ".probe" / token).read_text()
        if got != token:
            raise OSError(f"read {got!r} where the driver wrote {token!r}")
        mine = Path(view) / ".probe" / f"{token}-{socket.gethostname()}-{os.getpid()}"
        mine.write_text(token)
        mine.unlink()
        return "", view, got_nice
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}", view, got_nice


def run_env(worker: dict, sent: dict) -> dict:
    """The run's environment on a node: the worker's, less the thread settings the driver's
    shell did not have (Ray's `OMP_NUM_THREADS`), plus what the driver sent (its thread
    settings, `LMPO_*` and the few variables in FORWARDED)."""
    from lmpo.warmstart import PINNED_ENV

    drop = thread_env(worker)
    env = {k: v for k, v in worker.items() if k not in drop} | sent
    if PINNED_ENV in env:  # the sweep's pinned warm starts, as this node sees its folder
        env[PINNED_ENV] = node_path(env[PINNED_ENV])
    return env


def run_command(command: list[str], log: str, env: dict, cwd: str, nice: int = 0) -> int:
    """On a node: the run's command (this node's Python, its paths mapped), output appended
    to `log`, started as the local pool starts it (forked from a server in this Ray worker
    that imported the trainer once, so a worker pays the imports for its first run only),
    at the driver's niceness `nice` where the node allows it and with `run_env`; returns
    its exit code (negative: killed by that signal). The run dies with the worker."""
    take_niceness(nice)
    env = run_env(dict(os.environ), env)
    for key in thread_env(os.environ):  # the fork server starts with the run's settings
        if key not in env:
            del os.environ[key]
    os.environ.update(thread_env(env))
    argv = [sys.executable, *(node_path(a) if a.startswith("/") else a for a in command[1:])]
    proc = start(argv, Path(node_path(log)), env, cwd=node_path(cwd))
    return proc.wait()


def gpus_for(device: str, node_gpus: int) -> int:
    """The GPUs a run with `device` asks Ray for on a node with `node_gpus`: cuda one, auto
    one where the node has any (elsewhere Ray hides the GPUs from the task and auto
    resolves to the CPU), cpu none."""
    return 1 if device == "cuda" or (device == "auto" and node_gpus >= 1) else 0


@dataclass
class Node:
    id: str
    host: str
    cpus: int
    gpus: int
    threads: int  # torch threads of each run on this node: cpus // jobs
    busy: set = field(default_factory=set)  # run names placed here


@dataclass
class Task:
    run: object
    node: Node
    ref: object


class RayPool:
    """The launcher `lmpo.experiments.run.dispatch.execute` drives (see the module docstring)."""

    name, retries = "ray", RETRIES

    def __init__(self, jobs: int, out: Path, *, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise ConfigError("--launcher ray needs Ray: pip install 'lmpo[ray]'") from None
        self.ray, self.jobs, self.out = ray, jobs, Path(out)
        self.started_ray = address is None
        self.nice = os.nice(0)  # the runs get this, as the pool's children would
        if self.started_ray:  # a local Ray sized to this machine, stopped by close(); its
            ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
                     configure_logging=False,  # workers at the driver's niceness, not 15
                     _system_config={"worker_niceness": 0})
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
        self._remote_probe = ray.remote(num_cpus=0, max_retries=0)(probe)
        self._remote_run = ray.remote(max_retries=0)(run_command)
        self.tasks: dict[str, Task] = {}
        self.nodes: dict[str, Node] = {}
        self._previous_sigterm = signal.signal(signal.SIGTERM, on_sigterm) \
            if threading.current_thread() is threading.main_thread() else None
        try:
            self.refresh()
            if not self.nodes:
                raise LmpoError("the Ray cluster has no node with a CPU")
            self.check_storage()
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- the cluster
    def refresh(self) -> None:
        """The nodes alive now (a node that died takes its slots with it)."""
        alive = {}
        for n in self.ray.nodes():
            cpus = int(n.get("Resources", {}).get("CPU", 0))
            if n.get("Alive") and cpus >= 1:
                old = self.nodes.get(n["NodeID"])
                alive[n["NodeID"]] = old or Node(
                    n["NodeID"], n.get("NodeManagerHostname") or n.get("NodeManagerAddress", "?"),
                    cpus, int(n.get("Resources", {}).get("GPU", 0)), max(1, cpus // self.jobs))
        self.nodes = alive

    def check_storage(self) -> None:
        """Every node reads and writes `out` (module docstring), or one line per node that
        cannot."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        token = uuid.uuid4().hex
        folder = self.out / ".probe"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / token).write_text(token)
        try:
            refs = {node.id: self._remote_probe.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False)
            ).remote(str(self.out), token, self.nice) for node in self.nodes.values()}
            bad, slow = [], []
            for node_id, ref in refs.items():
                try:
                    error, view, nice = self.ray.get(ref, timeout=PROBE_TIMEOUT_S)
                except self.ray.exceptions.GetTimeoutError:
                    node = self.nodes[node_id]
                    raise LmpoError(f"node {node.host} ({node_id[:12]}) did not answer the "
                                    f"storage probe within {PROBE_TIMEOUT_S} s (no worker "
                                    "started there: is the node overloaded?)") from None
                node = self.nodes[node_id]
                if error:
                    bad.append(f"node {node.host} ({node_id[:12]}) cannot read and write the "
                               f"sweep directory {view}: {error}")
                if nice != self.nice:
                    slow.append(f"{node.host} ({node_id[:12]}) at {nice}")
        finally:
            (folder / token).unlink(missing_ok=True)
        if slow and not bad:
            print(f"warning: runs will run at a niceness other than this shell's ({self.nice}) "
                  f"on node {', '.join(slow)}: beside other busy processes there they get a "
                  "small share of the CPU; start those nodes with RAY_worker_niceness=0 (or "
                  "run Ray as root) so that lmpo can give them the driver's", file=sys.stderr)
        if bad:
            raise LmpoError("; ".join(bad) + " (every node must see --out on a shared file "
                            f"system; a node that mounts it elsewhere sets {PATH_MAP_ENV})")

    # ---------------------------------------------------------------- the launcher
    def free(self) -> bool:
        self.refresh()
        return any(len(n.busy) < self.jobs for n in self.nodes.values())

    def start(self, run, env: dict) -> Task:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node = min((n for n in self.nodes.values() if len(n.busy) < self.jobs),
                   key=lambda n: (len(n.busy), n.host, n.id))
        gpus = gpus_for(str(yaml.safe_load(Path(run.config).read_text()).get("device", "auto")),
                        node.gpus)
        if gpus and node.gpus < 1:
            raise LmpoError(f"{run.name} asks for a GPU (device cuda) and node {node.host} "
                            "has none")
        token = grant_lease(run.run_dir, holder=f"{node.host} ({node.id[:12]})")
        forwarded = {k: v for k, v in env.items()
                     if k in FORWARDED or (k.startswith("LMPO_") and k != PATH_MAP_ENV)}
        command = [*run.command(), f"threads={node.threads}"]
        ref = self._remote_run.options(
            num_cpus=node.threads, num_gpus=gpus,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
        ).remote(command, str(run.log), forwarded | thread_env(env) | {LEASE_ENV: str(token)},
                 os.getcwd(), self.nice)
        node.busy.add(run.name)
        task = Task(run, node, ref)
        self.tasks[run.name] = task
        return task

    def poll(self, task: Task) -> Outcome | None:
        ready, _ = self.ray.wait([task.ref], timeout=0)
        if not ready:
            if task.node.id in self.nodes:
                return None
            self.ray.cancel(task.ref, force=True)  # its node is gone: the task with it
            return self._finish(task, Outcome(None, f"node {task.node.host} died"))
        try:
            code = self.ray.get(task.ref)
        except self.ray.exceptions.RayError as exc:  # the worker or its node died
            return self._finish(task, Outcome(None, f"on node {task.node.host}: "
                                                    f"{type(exc).__name__}"))
        if code < 0:  # killed by a signal (the node going down, the OOM killer)
            return self._finish(task, Outcome(code, f"killed by signal {-code} on node "
                                                    f"{task.node.host}"))
        return self._finish(task, Outcome(code))

    def _finish(self, task: Task, outcome: Outcome) -> Outcome:
        task.node.busy.discard(task.run.name)
        self.tasks.pop(task.run.name, None)
        return outcome

    def where(self, task: Task) -> str:
        return f" on {task.node.host} ({task.node.threads} threads)"

    def describe(self) -> dict:
        return {"launcher": self.name, "jobs": self.jobs,
                "nodes": {n.host + " " + n.id[:12]: n.cpus for n in self.nodes.values()}}

    def close(self) -> None:
        """Cancel what still runs (the runs resume later) and stop the Ray this started."""
        for task in list(self.tasks.values()):
            try:
                self.ray.cancel(task.ref, force=True)
            except Exception:  # noqa: BLE001 - its node may be gone already
                pass
        self.tasks.clear()
        if self._previous_sigterm is not None:
            signal.signal(signal.SIGTERM, self._previous_sigterm)
        if self.ray.is_initialized():
            self.ray.shutdown()

