"""`lmpo compare --engine verl --launcher ray`: each verl launch submitted as a Ray job.

The launches are those `lmpo compare --engine verl` prints (`lmpo.experiments.engines.verl_launch`),
submitted through Ray's job submission API to the cluster at `--address` (the dashboard's
address, `http://HEAD:8265`; without it, a local Ray this call starts, dashboard included,
and stops). Every job's entrypoint runs in a shell on the cluster's head node, so
`$MODEL_PATH`, `$GPUS_PER_NODE`, `$NNODES`, `$MICRO_BATCH` and `$DATA` are taken from the
driver's environment (missing ones are an error before anything is submitted) and handed
to each job (its runtime environment's `env_vars`, with `LMPO_*`).

- **Order.** First one `lmpo export-data` job per data folder (skipped where
  `$DATA/<folder>/reward.py` already exists), then the verl runs, at most `--jobs` at once
  on the cluster (default 1: each verl run claims `$NNODES` x `$GPUS_PER_NODE` GPUs
  itself). A run whose data failed to export is not submitted.
- **Bookkeeping.** `OUT/verl_jobs.json` records each job's submission id, attempt and
  last status; when a job ends, its log (Ray's `get_job_logs`) is saved beside the run
  (`runs/<arm>/seed<k>/job.log`; `exports/<folder>.log`), and verl's file logger has
  written `verl.jsonl` there for `lmpo report`. Rerunning the command skips what
  succeeded, re-attaches to what still runs and submits again (attempt + 1) what
  failed, was stopped, or is unknown to the cluster.
- **Stopping.** Ctrl-C or `kill` of the driver stops the sweep's jobs that still run
  (`stop_job`, waiting for them to end) and records them as stopped; a rerun submits them
  again (verl resumes from its own checkpoints, `trainer.resume_mode`).

The entrypoint that starts verl's trainer is `python -m verl.trainer.main_ppo` unless
`--verl-entrypoint` names another (a wrapper script, or a stand-in for tests).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from lmpo.errors import ConfigError, LmpoError, on_sigterm
from lmpo.experiments.engines.verl_launch import (
    ENTRYPOINT,
    VerlPlan,
    plan_verl,
    shell_word,
    write_plan,
)
from lmpo.locks import directory_lock

USER_VARS = ("MODEL_PATH", "GPUS_PER_NODE", "NNODES", "MICRO_BATCH", "DATA")
JOBS_FILE = "verl_jobs.json"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
POLL_S = 2.0
STOP_WAIT_S = 60  # how long an interrupted driver waits for its jobs to stop


@dataclass
class Job:
    name: str  # "<arm>/seed<k>" or "export <folder>"
    entrypoint: str
    log: str  # where the job's log is saved when it ends
    needs: str = ""  # the job that must succeed first (a run's export)
    submission_id: str = ""
    attempt: int = 0
    status: str = ""  # "" never submitted; Ray's PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED

    @property
    def export(self) -> bool:
        return self.name.startswith("export ")


def plan_jobs(plan: VerlPlan, config_path: str, out: Path, entrypoint: str
              ) -> tuple[list[Job], list[str]]:
    """The export jobs, then one verl job per launchable arm x seed of `plan`; with the
    refusals."""
    runs = plan.runs
    refused = sorted({f"arm {r.arm}: " + "; ".join(r.refused) for r in runs if r.refused})
    config = str(Path(config_path).resolve()) if Path(config_path).is_file() else config_path
    exports: dict[str, Job] = {}
    jobs = []
    for run in (r for r in runs if not r.refused):
        if run.data not in exports:
            folder = f"$DATA/{run.data}"  # each word quoted but $DATA (shell_word)
            export = (f"test -f {shell_word(folder + '/reward.py')} || lmpo export-data "
                      f"--experiment {shlex.quote(config)} --arm {shlex.quote(run.arm)} "
                      f"--seed {run.seed} --out {shell_word(folder)}")
            exports[run.data] = Job(f"export {run.data}", export,
                                    str(out / "exports" / f"{run.data}.log"))
        jobs.append(Job(f"{run.arm}/seed{run.seed}", run.command(entrypoint),
                        str(Path(run.log).parent / "job.log"), needs=f"export {run.data}"))
    return list(exports.values()) + jobs, refused


def job_env() -> dict:
    missing = [v for v in USER_VARS if not os.environ.get(v)]
    if missing:
        raise ConfigError("--engine verl --launcher ray: set " + ", ".join(missing)
                          + " in the environment first (the verl commands read "
                          + ", ".join(f"${v}" for v in USER_VARS) + ")")
    return {k: v for k, v in os.environ.items()
            if k in USER_VARS or k.startswith("LMPO_") or k == "PYTHONUNBUFFERED"}


class JobSweep:
    """Submits and follows the jobs (module docstring); `run()` returns 0 if all succeed."""

    def __init__(self, client, jobs: list[Job], out: Path, *, at_once: int, env: dict,
                 say=print):
        self.client, self.jobs, self.out = client, jobs, out
        self.at_once, self.env, self.say = at_once, env, say
        self._restore()

    # ------------------------------------------------------------ the record
    def _restore(self) -> None:
        path = self.out / JOBS_FILE
        old = json.loads(path.read_text()) if path.exists() else {}
        for job in self.jobs:
            rec = old.get(job.name)
            if rec and rec["submission_id"] and rec["entrypoint"] == job.entrypoint:
                job.submission_id, job.attempt = rec["submission_id"], rec["attempt"]
                job.status = rec["status"] if rec["status"] in ("SUCCEEDED", "BLOCKED") else ""
                if rec["status"] in ("PENDING", "RUNNING"):  # the last driver went away
                    now = self._cluster_status(job)
                    # still running: re-attach; ended well: finish() saves its log
                    job.status = "RUNNING" if now in ("PENDING", "RUNNING", "SUCCEEDED") else ""
                if job.status == "BLOCKED":
                    job.status = ""  # its export is submitted again first

    def save(self) -> None:
        record = {j.name: asdict(j) for j in self.jobs}
        tmp = self.out / (JOBS_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        tmp.replace(self.out / JOBS_FILE)

    def _cluster_status(self, job: Job) -> str | None:
        try:
            return str(self.client.get_job_status(job.submission_id).value)
        except RuntimeError:  # unknown to this cluster (a new one, or its record expired)
            return None

    # ------------------------------------------------------------ the loop
    def submit(self, job: Job) -> None:
        job.attempt += 1
        slug = re.sub(r"[^A-Za-z0-9_-]+", "-", job.name)
        job.submission_id = f"lmpo-{slug}-{job.attempt}-{uuid.uuid4().hex[:6]}"
        self.client.submit_job(entrypoint=job.entrypoint, submission_id=job.submission_id,
                               runtime_env={"env_vars": self.env})
        job.status = "PENDING"
        self.say(f"submitted {job.name} as {job.submission_id}")
        self.save()

    def finish(self, job: Job, status: str) -> None:
        job.status = status
        try:
            logs = self.client.get_job_logs(job.submission_id)
        except RuntimeError as exc:
            logs = f"(Ray has no log for {job.submission_id}: {exc})\n"
        Path(job.log).parent.mkdir(parents=True, exist_ok=True)
        Path(job.log).write_text(logs)
        tail = "" if status == "SUCCEEDED" else ": " + last_line(logs)
        self.say(f"{job.name}: {status.lower()}{tail} (log {job.log})")
        self.save()

    def step(self) -> bool:
        """Follow the jobs once; True while any job can still change."""
        by_name = {j.name: j for j in self.jobs}
        for job in self.jobs:
            if job.status in ("PENDING", "RUNNING"):
                status = self._cluster_status(job) or "FAILED"
                if status in TERMINAL:
                    self.finish(job, status)
                elif status != job.status:
                    job.status = status
                    self.save()
        running = sum(j.status in ("PENDING", "RUNNING") and not j.export for j in self.jobs)
        for job in self.jobs:
            if job.status:
                continue
            need = by_name.get(job.needs)
            if need is not None and need.status != "SUCCEEDED":
                if need.status in ("FAILED", "STOPPED"):
                    job.status = "BLOCKED"
                    self.say(f"{job.name}: not submitted: {need.name} {need.status.lower()}")
                continue
            if not job.export:
                if running >= self.at_once:
                    continue
                running += 1
            self.submit(job)
        return any(j.status in ("", "PENDING", "RUNNING") for j in self.jobs)

    def run(self, poll_s: float = POLL_S) -> int:
        try:
            while self.step():
                wait(poll_s)
        except KeyboardInterrupt:
            self.stop()
            raise
        done = sum(j.status == "SUCCEEDED" for j in self.jobs)
        self.say(f"{done} of {len(self.jobs)} job(s) succeeded; record: {self.out / JOBS_FILE}")
        return 0 if done == len(self.jobs) else 1

    def stop(self) -> None:
        """Stop the sweep's jobs that still run; a rerun submits them again."""
        for job in self.jobs:
            if job.status in ("PENDING", "RUNNING"):
                try:
                    self.client.stop_job(job.submission_id)
                    deadline = time.monotonic() + STOP_WAIT_S  # no second writer on rerun
                    while (self._cluster_status(job) not in (None, *TERMINAL)
                           and time.monotonic() < deadline):
                        time.sleep(0.2)
                except RuntimeError:
                    pass
                job.status = "STOPPED"
                self.say(f"{job.name}: stopped ({job.submission_id}); rerun to submit it again")
        self.save()


def wait(seconds: float) -> None:
    time.sleep(seconds)


def last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else "(no output)"


def submit_verl_sweep(exp, config_path: str, out: str | None, *, address: str | None,
                      jobs: int = 1, strict: bool = False, entrypoint: str = ENTRYPOINT,
                      poll_s: float = POLL_S) -> int:
    """`lmpo compare --engine verl --launcher ray` (module docstring)."""
    if not out:
        raise ConfigError("--engine verl --launcher ray needs --out (the jobs' record and "
                          "the runs' logs)")
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    env = job_env()
    out = Path(out).absolute()
    with directory_lock(out, what="lmpo compare"):
        plan = plan_verl(exp, out)
        planned, refused = plan_jobs(plan, config_path, out, entrypoint)
        for line in refused:
            print(f"# refused: {line}", file=sys.stderr)
        if not any(not j.export for j in planned):
            raise LmpoError("no arm maps to verl")
        if strict and refused:
            return 1
        write_plan(plan, out)
        client, started = connect(address)
        previous = signal.signal(signal.SIGTERM, on_sigterm) \
            if threading.current_thread() is threading.main_thread() else None
        try:
            sweep = JobSweep(client, planned, out, at_once=jobs, env=env)
            sweep.save()
            return sweep.run(poll_s)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if started:
                import ray

                ray.shutdown()


def connect(address: str | None):
    """(a JobSubmissionClient, whether this call started the Ray it talks to)."""
    try:
        import ray
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise ConfigError("--launcher ray needs Ray's job API: pip install 'lmpo[ray]'") \
            from None
    if address:
        try:
            return JobSubmissionClient(address), False
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise LmpoError(f"cannot reach Ray's job API at {address} (the head's "
                            f"dashboard, http://HEAD:8265): {exc}") from None
    ctx = ray.init(num_cpus=os.cpu_count(), include_dashboard=True, log_to_driver=False,
                   configure_logging=False)
    return JobSubmissionClient(f"http://{ctx.dashboard_url}"), True

