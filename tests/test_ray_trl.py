"""`lmpo compare --engine trl --launcher ray` (make test-trl: TRL's environment has Ray):
the TRL runs of a sweep as Ray tasks on Ray's own multi-node test cluster write the rows
the local pool's TRL runs write, each run under a lease held by a worker node."""

from __future__ import annotations

import json

import pytest
import yaml

pytest.importorskip("trl", reason="TRL not installed: run `make test-trl`")
pytest.importorskip("ray", reason="Ray not installed: run `make test-trl`")
from lmpo.experiments.design.spec import load_experiment  # noqa: E402
from lmpo.experiments.run.sweep import compare  # noqa: E402
from lmpo.locks import read_lease  # noqa: E402
from tests.test_ray import JOBS, cluster, processes, rows  # noqa: E402, F401  (cluster: the fixture)
from tests.test_trl import tiny_sweep_base  # noqa: E402


def test_trl_runs_on_the_cluster_write_the_pools_rows(cluster, tmp_path,  # noqa: F811
                                                      tiny_policy_dir):
    c, workers = cluster
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "base": tiny_sweep_base(tiny_policy_dir),
        "arms": {"grpo": {"preset": "grpo"}, "cegppo": {"preset": "cegppo"}},
        "seeds": [0], "steps": 3, "differs_in": ["loss"], "claims": []}))
    exp = load_experiment(path)
    assert compare(exp, tmp_path / "pool", jobs=JOBS, live=False, engine="trl") == 0
    out = tmp_path / "ray"
    assert compare(exp, out, jobs=JOBS, live=False, engine="trl", launcher_name="ray",
                   address=c.address) == 0
    want = rows(tmp_path / "pool")
    assert len(want) == 2 and all(len(r) == 3 for r in want.values())
    assert rows(out) == want
    # the TRL run's process as the pool's: threads, CPUs, thread settings (niceness: the
    # test cluster's nodes keep Ray's 15, which lmpo lowers only where it may; test_ray.py)
    pool, ray_runs = processes(tmp_path / "pool"), processes(out)
    assert len(pool) == 2 and {n: {k: v for k, v in p.items() if k != "nice"}
                               for n, p in ray_runs.items()} == \
        {n: {k: v for k, v in p.items() if k != "nice"} for n, p in pool.items()}
    record = json.loads((out / "sweep.json").read_text())[-1]
    assert record["launcher"] == "ray"
    for run_dir in (out / "runs").glob("*/seed0"):
        assert json.loads((run_dir / "eval.json").read_text())["engine"] == "trl"
        assert "threads: 1\n" in (run_dir / "config.yaml").read_text()  # 2 CPUs / 2 jobs
        holder = read_lease(run_dir)["holder"].split("(")[1][:12]
        assert holder in {w.node_id[:12] for w in workers}
