"""`lmpo compare --launcher ray` on Ray's own multi-node test cluster, on this machine
(make test-ray, in the verl environment, which has Ray): a head that runs no run and two
worker nodes of 2 CPUs each, loopback only, one cluster for the whole file. Against the
local pool: the same rows; a worker node killed mid-sweep (not gracefully): its runs
finish on the other with the rows of an uninterrupted sweep; a node that cannot see the
sweep directory: one line naming it; the resource mapping; the fencing lease."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray not installed: run `make test-ray`")
from ray.cluster_utils import Cluster  # noqa: E402

from lmpo.errors import LeaseLost, LmpoError  # noqa: E402
from lmpo.experiments.ray_launcher import node_path  # noqa: E402
from lmpo.experiments.sweep import compare  # noqa: E402
from lmpo.locks import LEASE_ENV, check_lease, grant_lease, read_lease  # noqa: E402
from lmpo.trainer.checkpoint import untimed_rows  # noqa: E402
from tests.test_experiments import experiment  # noqa: E402

JOBS = 2  # runs at once per node: 2 CPUs / 2 = 1 thread each, as the pool gives here


@pytest.fixture(scope="module")
def cluster():
    os.environ.pop("RAY_ADDRESS", None)
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
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
    exp = experiment(tmp, tiny_policy_dir, seeds=2, steps=5)
    assert compare(exp, tmp / "out", jobs=2, live=False) == 0
    return exp, rows(tmp / "out")


def test_the_overhead_benchmark_runs_and_compares_the_rows(tmp_path):
    """benchmarks/ray_overhead.py at its smoke size: both sweeps, their wall times and the
    same rows. Its own local Ray: it runs before the test cluster starts (the first test
    that asks for it), so that the two never share the machine's Ray."""
    from tests.test_benchmarks import bench

    result = bench("ray_overhead", "--smoke", out=tmp_path / "out", home=tmp_path / "home")
    assert result["same_rows"] is True and result["runs"] == 2
    assert result["pool_wall_s"] > 0 and result["ray_wall_s"] > 0

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


def test_a_ray_sweep_writes_the_pools_rows_with_each_nodes_threads(cluster, pool_sweep,
                                                                   tmp_path):
    c, workers = cluster
    exp, want = pool_sweep
    assert compare(exp, tmp_path / "out", jobs=JOBS, live=False, launcher_name="ray",
                   address=c.address) == 0
    assert rows(tmp_path / "out") == want
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
    exp, want = pool_sweep
    out = tmp_path / "out"
    result = {}
    sweep = threading.Thread(target=lambda: result.setdefault("rc", compare(
        exp, out, jobs=JOBS, live=False, launcher_name="ray", address=c.address)))
    sweep.start()
    victim, deadline = workers[1], time.time() + 240
    while time.time() < deadline:
        hit = [p.parent for p in out.glob("runs/*/seed*/.lease")
               if victim.node_id[:12] in read_lease(p.parent)["holder"]
               and len((p.parent / "metrics.jsonl").read_text().splitlines()
                       if (p.parent / "metrics.jsonl").exists() else []) >= 2]
        if hit:
            break
        time.sleep(0.2)
    assert hit, "no run reached step 2 on the node to kill"
    c.remove_node(victim, allow_graceful=False)
    sweep.join(timeout=300)
    assert not sweep.is_alive() and result["rc"] == 0
    record = json.loads((out / "sweep.json").read_text())[-1]
    assert record["retried"] and all(s == "done" for s in record["status"].values())
    for run in hit:
        assert read_lease(run)["token"] >= 2  # a second attempt took it over
        assert victim.node_id[:12] not in read_lease(run)["holder"]
    assert rows(out) == want
    workers[1] = c.add_node(num_cpus=2)  # the next test gets its two workers back
    c.wait_for_nodes()

