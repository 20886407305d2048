"""`lmpo export-data` output read by verl itself: its parquet through verl's RLHFDataset
columns and its reward file through verl's own custom-reward loader (make test-verl)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

verl = pytest.importorskip("verl", reason="verl not installed: run `make test-verl`")
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.reward import get_custom_reward_fn  # noqa: E402

from lmpo.cli import main  # noqa: E402


def test_verls_loader_calls_the_exported_reward_with_verls_arguments(tmp_path):
    out = tmp_path / "data"
    assert main(["export-data", "--config", "grpo", "--out", str(out), "rollout.pool_size=16",
                 "log.eval_per_tier=4"]) == 0
    cfg = OmegaConf.create({"reward": {"custom_reward_function": {
        "path": str(out / "reward.py"), "name": "compute_score", "reward_kwargs": {}}}})
    fn = get_custom_reward_fn(cfg)
    for row in pq.read_table(out / "test.parquet").to_pylist():
        gold = row["reward_model"]["ground_truth"]
        extra = dict(row["extra_info"], num_turns=None, rollout_reward_scores={})
        assert fn(data_source=row["data_source"], solution_str=f"#{gold}", ground_truth=gold,
                  extra_info=extra) == {"score": 1.0, "acc": 1.0}
        assert fn(data_source=row["data_source"], solution_str="no answer", ground_truth=gold,
                  extra_info=extra) == {"score": 0.0, "acc": 0.0}


def test_verl_has_no_cpu_training_engine_to_run_lmpos_loss_in():
    """docs/verl.md: verl 0.9.1 has no DataParallelPPOActor any more, and every training
    engine registers for cuda or npu only, so lmpo's loss cannot run inside verl's real
    update loop on this CPU. When a verl release registers a CPU engine this fails: then
    write the test that runs `lmpo_<loss>` through it."""
    import importlib.util

    import verl.workers.engine  # noqa: F401  (imports every engine, which registers)
    from verl.workers.engine.base import EngineRegistry

    assert importlib.util.find_spec("verl.workers.actor") is None
    devices = {key if isinstance(key, str) else key[0]
               for backends in EngineRegistry._engines.values()
               for by_device in backends.values() for key in by_device}
    assert devices and "cpu" not in devices, devices
