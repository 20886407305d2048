"""The TRL benchmarks run (in .venv-trl, `make test-trl`): each at its smallest size,
writing its JSON to a scratch folder, whose shape is checked (tests/test_benchmarks.py
covers the rest of benchmarks/)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl", reason="TRL not installed: run `make test-trl`")

from tests.test_benchmarks import bench  # noqa: E402


def test_vs_trl_smoke(tiny_policy_dir, tmp_path):
    r = bench("vs_trl", "--sizes", "nano", "--nano-policy", str(tiny_policy_dir), "--steps", "4",
              "--nano-rounds", "1", out=tmp_path / "out", home=tmp_path / "home")
    (row,) = r["rows"]
    assert r["precision"] == "float32" and row["steps"] == 4
    assert row["trl_s_per_step"] > 0 and row["lmpo_s_per_step"] > 0 and row["speedup"] > 0


def test_vs_trl_smoke_in_bf16(tiny_policy_dir, tmp_path):
    r = bench("vs_trl", "--sizes", "nano", "--nano-policy", str(tiny_policy_dir), "--steps", "4",
              "--nano-rounds", "1", "--precision", "bf16", out=tmp_path / "out",
              home=tmp_path / "home")
    assert r["precision"] == "bf16" and r["rows"][0]["speedup"] > 0


def test_rm_vs_trl_smoke(tiny_policy_dir, tmp_path):
    r = bench("rm_vs_trl", "--epochs", "1", "--rounds", "1", f"trunk={tiny_policy_dir}",
              f"sample_policy={tiny_policy_dir}", "problems=16", "pairs_per_problem=2",
              out=tmp_path / "out", home=tmp_path / "home")
    assert r["trl_over_lmpo_time"] > 0
    assert set(r["results"]) == {"trl", "lmpo"}
