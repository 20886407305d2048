"""Weights & Biases logging, offline: the run's config and every metrics row reach it, a
resumed run continues the same tracker run, a bad setting fails before any work."""

from __future__ import annotations

import pytest

from lmpo.config import load_config
from lmpo.errors import ConfigError
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

TINY = ["rollout.batch_size=8", "rollout.group_size=4", "rollout.pool_size=16",
        "rollout.max_new_tokens=4", "log.eval_per_tier=2", "log.eval_max_new_tokens=4",
        "log.tensorboard=false", "threads=1", "log.checkpoint_every=1"]


def test_an_offline_run_logs_config_and_rows_and_resumes_the_same_id(tmp_path,
                                                                    tiny_policy_dir, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    over = TINY + [f"policy={tiny_policy_dir}", "steps=2",
                   'log.wandb={"project": "lmpo-test", "mode": "offline"}']
    run_dir = tmp_path / "run"
    train(load_config(TrainConfig, "grpo", over), run_dir, progress=False)
    run_id = (run_dir / "wandb_id").read_text().strip()
    (offline,) = list((run_dir / "wandb").glob(f"offline-run-*-{run_id}"))
    # the offline log is protobuf records: keys and string values appear as raw bytes
    data = (offline / f"run-{run_id}.wandb").read_bytes()
    assert b"reward/mean" in data and b"loss/displacement" in data  # the metrics rows
    assert b"ppo_clip" in data and b"chain_sum" in data  # the run's config
    over[over.index("steps=2")] = "steps=3"
    train(load_config(TrainConfig, "grpo", over), run_dir, resume=True, progress=False)
    assert (run_dir / "wandb_id").read_text().strip() == run_id


def test_a_bad_tracker_setting_fails_before_any_work():
    for bad in ['log.wandb={"mode": "sometimes"}', 'log.wandb={"projekt": "x"}']:
        with pytest.raises(ConfigError, match="log.wandb"):
            load_config(TrainConfig, "grpo", [bad]).validate()
