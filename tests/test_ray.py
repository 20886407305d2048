"""`lmpo compare --launcher ray` on Ray's own multi-node test cluster, on this machine
(make test-ray, in the verl environment, which has Ray): a head that runs no run and two
worker nodes of 2 CPUs each, loopback only, one cluster for the whole file. Against the
local pool: the same rows; a worker node killed mid-sweep (not gracefully): its runs
finish on the other with the rows of an uninterrupted sweep; a node that cannot see the
sweep directory: one line naming it; the resource mapping; the fencing lease. And
`--engine verl --launcher ray`: each verl launch a Ray job (the job API of the head's
dashboard), with a stand-in for verl's trainer: verl itself does not run here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray not installed: run `make test-ray`")
from ray.cluster_utils import Cluster  # noqa: E402

from lmpo.errors import LeaseLost, LmpoError  # noqa: E402
from lmpo.experiments.run.ray_launcher import node_path, run_env  # noqa: E402
from lmpo.experiments.run.sweep import compare  # noqa: E402
from lmpo.locks import LEASE_ENV, check_lease, grant_lease, read_lease  # noqa: E402
from lmpo.process_env import PROCESS_FILE, comparable  # noqa: E402
from lmpo.trainer.checkpoint import untimed_rows  # noqa: E402
from tests.test_experiments import experiment  # noqa: E402

JOBS = 2  # runs at once per node: 2 CPUs / 2 = 1 thread each, as the pool gives here
STEPS = 20  # the reference sweep's run length: long enough that a run seen early on
KILL_BY = 5  # (by step KILL_BY) is still running when its node is killed


@pytest.fixture(scope="module")
def cluster():
    os.environ.pop("RAY_ADDRESS", None)
    # a job's shell finds `lmpo` and `python` on PATH, as on a cluster with lmpo installed
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": True})
    workers = [c.add_node(num_cpus=2) for _ in range(2)]
    c.wait_for_nodes()
    yield c, workers
    c.shutdown()


def rows(out: Path) -> dict:
    """Every run's metrics rows without the wall-clock timings."""
    return {str(p.relative_to(out)): untimed_rows(p)
            for p in sorted((out / "runs").glob("*/seed*/metrics.jsonl"))}


@pytest.fixture(scope="module")
def pool_sweep(tiny_policy_dir, tmp_path_factory):
    """The reference: the tiny sweep run by the local pool (1 thread per run)."""
    tmp = tmp_path_factory.mktemp("pool")
    exp = experiment(tmp, tiny_policy_dir, seeds=2, steps=STEPS)
    assert compare(exp, tmp / "out", jobs=2, live=False) == 0
    return exp, rows(tmp / "out"), tmp / "out"


def test_the_overhead_benchmark_runs_and_compares_the_rows(tmp_path):
    """benchmarks/ray_overhead.py at its smoke size: both sweeps, their wall times and the
    same rows. Its own local Ray: it runs before the test cluster starts (the first test
    that asks for it), so that the two never share the machine's Ray."""
    from tests.test_benchmarks import bench

    result = bench("ray_overhead", "--smoke", "--beside", "0", out=tmp_path / "out",
                   home=tmp_path / "home")
    assert result["same_rows"] is True and result["runs"] == 2
    assert result["pool_wall_s"] > 0 and result["ray_wall_s"] > 0
    assert result["pool_step_s"] > 0 and result["ray_step_s"] > 0
    # the local Ray's runs get the pool's threads, CPUs, niceness (not Ray's 15) and env
    assert result["same_process"] is True
    assert all(p["nice"] == os.nice(0) and "OMP_NUM_THREADS" not in p["env"]
               for p in result["process"].values()) or "OMP_NUM_THREADS" in os.environ


def test_a_run_s_environment_is_the_worker_s_with_the_driver_s_thread_settings(monkeypatch):
    worker = {"PATH": "/node/bin", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "4",
              "LMPO_PATH_MAP": "/a=/b", "HOME": "/root"}
    sent = {"KMP_WARNINGS": "0", "LMPO_LEASE": "3", "PYTHONUNBUFFERED": "1"}
    assert run_env(worker, sent) == {"PATH": "/node/bin", "LMPO_PATH_MAP": "/a=/b",
                                     "HOME": "/root", "KMP_WARNINGS": "0",
                                     "LMPO_LEASE": "3", "PYTHONUNBUFFERED": "1"}
    assert run_env(worker, {"OMP_NUM_THREADS": "2"})["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("LMPO_PATH_MAP", "/driver=/node")  # the sweep's pinned warm starts,
    sent = {"LMPO_WARMSTARTS": "/driver/sweep/warmstarts"}  # as the node sees the folder
    assert run_env(worker, sent)["LMPO_WARMSTARTS"] == "/node/sweep/warmstarts"


def may_lower_niceness() -> bool:
    """Whether a process here may lower its niceness again (root or CAP_SYS_NICE)."""
    code = "import os; os.nice(5); os.setpriority(os.PRIO_PROCESS, 0, os.nice(0) - 5)"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0

def test_path_maps_rewrite_the_driver_paths_a_node_sees():
    assert node_path("/shared/sweep/runs/a", "/shared=/mnt/nfs") == "/mnt/nfs/sweep/runs/a"
    assert node_path("/sharedx/a", "/shared=/mnt/nfs") == "/sharedx/a"  # prefixes, not text
    assert node_path("/a/b", "/x=/y; /a/=/z") == "/z/b"
    with pytest.raises(LmpoError, match="DRIVER_PREFIX=NODE_PREFIX"):
        node_path("/a", "/a:/b")


def test_a_writer_whose_lease_was_handed_on_stops_before_writing(tmp_path, monkeypatch):
    first = grant_lease(tmp_path, "node a")
    monkeypatch.setenv(LEASE_ENV, str(first))
    check_lease(tmp_path)  # still ours
    second = grant_lease(tmp_path, "node b")
    assert second == first + 1 and read_lease(tmp_path)["holder"] == "node b"
    with pytest.raises(LeaseLost, match=r"token 1\) was handed to node b \(token 2\)"):
        check_lease(tmp_path)
    monkeypatch.delenv(LEASE_ENV)
    check_lease(tmp_path)  # a run with no lease (a local one) is not checked


def processes(out: Path) -> dict:
    """Each run's process settings (lmpo.process_env.comparable)."""
    return {str(p.parent.relative_to(out)): comparable(json.loads(p.read_text()))
            for p in sorted((out / "runs").glob(f"*/seed*/{PROCESS_FILE}"))}


def test_a_ray_sweep_writes_the_pools_rows_with_each_nodes_threads(cluster, pool_sweep,
                                                                   tmp_path, monkeypatch,
                                                                   capsys):
    c, workers = cluster
    exp, want, _ = pool_sweep
    monkeypatch.setenv("KMP_WARNINGS", "0")  # a thread setting of the driver's shell
    assert compare(exp, tmp_path / "out", jobs=JOBS, live=False, launcher_name="ray",
                   address=c.address) == 0
    assert rows(tmp_path / "out") == want
    # each run's process as the pool's: threads, CPUs, the driver's thread settings (not
    # the OMP_NUM_THREADS Ray sets) and, where the node lets lmpo lower it from Ray's 15
    # (the test cluster's nodes keep Ray's default), the driver's niceness; else a warning
    pool, ray_runs = processes(pool_sweep[2]), processes(tmp_path / "out")
    assert len(ray_runs) == len(pool) == 4
    for name, got in ray_runs.items():
        assert got["env"] == pool[name]["env"] | {"KMP_WARNINGS": "0"}
        assert got["torch_threads"] == pool[name]["torch_threads"] == 1
        assert {k: got[k] for k in ("cpu_count", "affinity", "torch_interop_threads")} == \
            {k: pool[name][k] for k in ("cpu_count", "affinity", "torch_interop_threads")}
        if may_lower_niceness():
            assert got["nice"] == pool[name]["nice"] == os.nice(0)
        else:
            assert got["nice"] > os.nice(0)
    if not may_lower_niceness():
        assert "RAY_worker_niceness=0" in capsys.readouterr().err
    record = json.loads((tmp_path / "out" / "sweep.json").read_text())[-1]
    assert record["launcher"] == "ray" and sorted(record["nodes"].values()) == [2, 2]
    for config in (tmp_path / "out" / "runs").glob("*/seed*/config.yaml"):
        assert "threads: 1\n" in config.read_text()  # 2 CPUs / 2 jobs
    # each run was one attempt with one lease, held by a worker node (the head has no CPU)
    holders = {read_lease(p.parent)["holder"].split("(")[1][:12]
               for p in (tmp_path / "out" / "runs").glob("*/seed*/.lease")}
    assert holders <= {w.node_id[:12] for w in workers} and len(holders) == 2


def test_a_node_that_cannot_see_the_sweep_directory_is_named(cluster, tiny_policy_dir,
                                                             tmp_path):
    c, _ = cluster
    blind = c.add_node(num_cpus=1, env_vars={"LMPO_PATH_MAP": f"{tmp_path}=/nonexistent/x"})
    c.wait_for_nodes()
    try:
        exp = experiment(tmp_path, tiny_policy_dir, seeds=1, steps=2)
        with pytest.raises(LmpoError) as err:
            compare(exp, tmp_path / "out", jobs=JOBS, live=False, launcher_name="ray",
                    address=c.address)
        message = str(err.value)
        assert "\n" not in message and blind.node_id[:12] in message
        assert "cannot read and write the sweep directory /nonexistent/x/out" in message
        assert not (tmp_path / "out" / "runs").exists()  # nothing started
    finally:
        c.remove_node(blind)


def test_a_killed_node_s_runs_finish_on_the_other_with_the_same_rows(cluster, pool_sweep,
                                                                     tmp_path):
    """Not a graceful shutdown: the raylet and its workers are killed while a run on that
    node is part-way (rows written, checkpoints every step). The driver sees the node go,
    retries its runs on the live node (each resumes from its checkpoint under a new lease),
    and the sweep's rows equal the uninterrupted pool's. Without the retry the runs fail."""
    c, workers = cluster
    exp, want, _ = pool_sweep
    out = tmp_path / "out"
    result = {}
    sweep = threading.Thread(target=lambda: result.setdefault("rc", compare(
        exp, out, jobs=JOBS, live=False, launcher_name="ray", address=c.address)))
    sweep.start()
    victim, deadline = workers[1], time.time() + 240

    def part_way() -> list[Path]:
        """The victim's runs with rows written, early on."""
        return [p.parent for p in out.glob("runs/*/seed*/.lease")
                if victim.node_id[:12] in read_lease(p.parent)["holder"]
                and 2 <= len((p.parent / "metrics.jsonl").read_text().splitlines()
                             if (p.parent / "metrics.jsonl").exists() else []) <= KILL_BY]

    while time.time() < deadline and not (hit := part_way()):
        time.sleep(0.05)
    assert hit, "no run reached step 2 on the node to kill"
    c.remove_node(victim, allow_graceful=False)
    sweep.join(timeout=300)
    assert not sweep.is_alive() and result["rc"] == 0
    record = json.loads((out / "sweep.json").read_text())[-1]
    assert record["retried"] and all(s == "done" for s in record["status"].values())
    for run in hit:  # part-way when the node went: a second attempt took each over
        assert read_lease(run)["token"] >= 2
        assert victim.node_id[:12] not in read_lease(run)["holder"]
    assert rows(out) == want
    workers[1] = c.add_node(num_cpus=2)  # the next test gets its two workers back
    c.wait_for_nodes()



# ------------------------------------------------ --engine verl --launcher ray (Ray jobs)
STAND_IN = """
import json, os, sys, time
args = dict(a.split("=", 1) for a in sys.argv[1:])
name, ctl = args["trainer.experiment_name"], os.environ["LMPO_STANDIN"]
open(f"{ctl}/trace", "a").write(f"start {name}\\n")
assert os.path.exists(args["data.train_files"]), "the export did not run first"
print("stand-in:", name, args["actor_rollout_ref.actor.policy_loss.loss_mode"],
      args["actor_rollout_ref.model.path"], flush=True)
while os.path.exists(f"{ctl}/hold"):
    time.sleep(0.1)
fail = name in open(f"{ctl}/fail").read().split()
if not fail:
    with open(os.environ["VERL_FILE_LOGGER_PATH"], "a") as f:
        f.write(json.dumps({"step": 1, "data": {"critic/score/mean": 0.5}}) + "\\n")
open(f"{ctl}/trace", "a").write(f"end {name}\\n")
sys.exit(f"stand-in: failing {name}" if fail else 0)
"""


def verl_experiment(tmp_path, policy, seeds):
    one = {"optim": {"minibatches": 1}}  # verl splits the tiny batch's prompts no further
    return experiment(tmp_path, policy, seeds=seeds, steps=2, arms={
        "grpo": {"preset": "grpo", "overrides": one},
        "cegppo": {"preset": "cegppo", "overrides": one}})


@pytest.fixture
def verl_jobs(cluster, tiny_policy_dir, tmp_path, monkeypatch):
    """(submit(), the control folder): a tiny two-arm experiment submitted as Ray jobs to
    the test cluster's dashboard, the stand-in in place of verl's trainer."""
    from lmpo.experiments.engines.verl_jobs import submit_verl_sweep

    c, _ = cluster
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "fail").write_text("")
    (ctl / "stand_in.py").write_text(STAND_IN)
    for var, value in {"MODEL_PATH": "/models/m", "GPUS_PER_NODE": "1", "NNODES": "1",
                       "MICRO_BATCH": "2", "DATA": str(tmp_path / "data"),
                       "LMPO_STANDIN": str(ctl)}.items():
        monkeypatch.setenv(var, value)
    exp = verl_experiment(tmp_path, tiny_policy_dir, seeds=2)
    dashboard = "http://" + c.head_node.address_info["webui_url"]

    def submit(**kw):
        return submit_verl_sweep(exp, str(tmp_path / "exp.yaml"), str(tmp_path / "out"),
                                 address=dashboard, jobs=1, poll_s=0.3,
                                 entrypoint=f"python {ctl / 'stand_in.py'}", **kw)
    return submit, ctl


def job_record(out: Path) -> dict:
    return json.loads((out / "verl_jobs.json").read_text())


def test_verl_jobs_need_the_placeholders_and_a_reachable_job_api(tiny_policy_dir, tmp_path,
                                                                monkeypatch):
    from lmpo.errors import ConfigError
    from lmpo.experiments.engines.verl_jobs import submit_verl_sweep

    for var in ("MODEL_PATH", "DATA", "NNODES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GPUS_PER_NODE", "1")
    monkeypatch.setenv("MICRO_BATCH", "2")
    exp = verl_experiment(tmp_path, tiny_policy_dir, seeds=1)
    with pytest.raises(ConfigError, match=r"set MODEL_PATH, NNODES, DATA in the environment"):
        submit_verl_sweep(exp, "x.yaml", str(tmp_path / "out"), address="http://x:1")
    assert not (tmp_path / "out").exists()  # nothing written, nothing submitted
    for var in ("MODEL_PATH", "DATA", "NNODES"):
        monkeypatch.setenv(var, "1")
    with pytest.raises(LmpoError, match=r"cannot reach Ray's job API at http://127.0.0.1:1 "):
        submit_verl_sweep(exp, "x.yaml", str(tmp_path / "out"), address="http://127.0.0.1:1")


def test_verl_runs_as_ray_jobs_one_at_a_time_a_failure_resubmitted_on_rerun(verl_jobs,
                                                                            tmp_path):
    """The data exported once before any run, the runs one at a time (--jobs 1), each job's
    log and verl's metrics in its run directory; a failed run is reported with its last
    line, and a rerun submits it alone again (attempt 2), leaving the rest."""
    submit, ctl = verl_jobs
    out = tmp_path / "out"
    (ctl / "fail").write_text("grpo-seed1")
    assert submit() == 1
    first = job_record(out)
    runs = {k: v for k, v in first.items() if not k.startswith("export ")}
    assert sorted(runs) == ["cegppo/seed0", "cegppo/seed1", "grpo/seed0", "grpo/seed1"]
    assert {k: v["status"] for k, v in runs.items()} == {
        "cegppo/seed0": "SUCCEEDED", "cegppo/seed1": "SUCCEEDED", "grpo/seed0": "SUCCEEDED",
        "grpo/seed1": "FAILED"}
    exports = [v for k, v in first.items() if k.startswith("export ")]
    assert exports and all(v["status"] == "SUCCEEDED" for v in exports)
    trace = (ctl / "trace").read_text().splitlines()  # never two runs at once:
    assert len(trace) == 8 and all(  # each start followed by its own end
        s == f"start {n}" and e == f"end {n}"
        for s, e, n in zip(trace[0::2], trace[1::2], [x.split()[1] for x in trace[0::2]],
                           strict=True))
    log = (out / "runs" / "grpo" / "seed1" / "job.log").read_text()
    assert "stand-in: failing grpo-seed1" in log
    ok = out / "runs" / "cegppo" / "seed0"
    assert "stand-in: cegppo-seed0 lmpo_cegppo /models/m" in (ok / "job.log").read_text()
    assert json.loads((ok / "verl.jsonl").read_text())["data"]["critic/score/mean"] == 0.5
    (ctl / "fail").write_text("")
    (ctl / "trace").write_text("")
    assert submit() == 0
    second = job_record(out)
    assert second["grpo/seed1"]["status"] == "SUCCEEDED" and second["grpo/seed1"]["attempt"] == 2
    assert {k: v["submission_id"] for k, v in second.items() if k != "grpo/seed1"} == \
        {k: v["submission_id"] for k, v in first.items() if k != "grpo/seed1"}
    assert (ctl / "trace").read_text().splitlines() == ["start grpo-seed1", "end grpo-seed1"]


def test_interrupting_the_driver_stops_its_verl_jobs_and_a_rerun_finishes(verl_jobs,
                                                                          tmp_path,
                                                                          monkeypatch):
    from lmpo.experiments.engines import verl_jobs as module

    submit, ctl = verl_jobs
    out = tmp_path / "out"
    (ctl / "hold").write_text("")  # the first run waits until released

    def interrupt_once_running(seconds):  # once a verl run (not an export) runs
        if any(v["status"] == "RUNNING" and not k.startswith("export ")
               for k, v in job_record(out).items()):
            raise KeyboardInterrupt
        time.sleep(seconds)

    monkeypatch.setattr(module, "wait", interrupt_once_running)
    with pytest.raises(KeyboardInterrupt):
        submit()
    stopped = [k for k, v in job_record(out).items()  # an export may be stopped too
               if v["status"] == "STOPPED" and not k.startswith("export ")]
    assert len(stopped) == 1
    (ctl / "hold").unlink()
    monkeypatch.setattr(module, "wait", time.sleep)
    assert submit() == 0
    assert job_record(out)[stopped[0]]["attempt"] == 2
