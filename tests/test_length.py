"""Response-length handling (lmpo.trainer.length): DAPO's soft overlong penalty against
its formula by hand, TRL's mask_truncated_completions in a run, the refusals. Against
verl 0.9.1's own DAPO reward manager: tests/test_verl_peers.py."""

from __future__ import annotations

import json

import pytest
import torch

from lmpo.config import ConfigError, load_config
from lmpo.experiments.engines.trl_mapping import trl_refusals
from lmpo.experiments.engines.verl_launch import refusals
from lmpo.trainer.length import overlong_penalty
from lmpo.trainer.loop import train
from lmpo.trainer.metric_names import declared, logs
from lmpo.trainer.train_config import TrainConfig
from tests.test_trainer import tiny_cfg


def test_the_overlong_penalty_by_hand():
    """Budget 20, buffer 8, factor 0.5: nothing up to 12 tokens, then -0.5 (L - 12) / 8,
    -0.5 at the budget."""
    lengths = torch.tensor([1, 12, 13, 16, 19, 20])
    want = [0.0, 0.0, -0.5 / 8, -0.5 * 4 / 8, -0.5 * 7 / 8, -0.5]
    got = overlong_penalty(lengths, 20, 8, 0.5)
    assert got.dtype == torch.float64 and got.tolist() == pytest.approx(want, abs=1e-15)
    assert overlong_penalty(lengths, 20, 20, 1.0).tolist() == pytest.approx(
        [-x / 20 for x in lengths.tolist()])  # the whole budget as buffer


def rows_of(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_overlong_scores_and_masked_truncations_in_a_run(tiny_policy_dir, tmp_path):
    """The random policy runs every response to the budget (6 tokens): every one is
    truncated and penalised by the full factor; with loss.mask_truncated the update has
    no token left, so its policy term is 0 while that of the same run without it is
    not."""
    common = ["steps=2", "reward.overlong={buffer_len: 4, penalty_factor: 0.3}",
              "reward.scale=pm1"]  # -1 / +1 scores: the penalty moves them off a tie
    cfg = tiny_cfg(tiny_policy_dir, "grpo", [*common, "loss.mask_truncated=true"])
    train(cfg, tmp_path / "masked", progress=False)
    masked = rows_of(tmp_path / "masked")
    for row in masked:
        assert row["rollout/truncated_frac"] == 1.0
        assert row["reward/overlong_mean"] == pytest.approx(-0.3)
        assert row["reward/overlong_frac"] == 1.0
        assert row["reward/mean"] == pytest.approx(-1.3, abs=1e-6)  # all wrong: -1 - 0.3
        assert row.get("loss/term_policy", 0.0) == 0.0
        assert all(logs(declared(cfg), k) for k in row)
    plain = tiny_cfg(tiny_policy_dir, "grpo", ["steps=1", "optim.entropy_coef=0.01", *common])
    train(plain, tmp_path / "plain", progress=False)
    assert rows_of(tmp_path / "plain")[0]["loss/term_entropy"] != 0.0
    cut = tiny_cfg(tiny_policy_dir, "grpo", ["steps=1", "optim.entropy_coef=0.01",
                                             "loss.mask_truncated=true", *common])
    train(cut, tmp_path / "cut", progress=False)
    assert rows_of(tmp_path / "cut")[0].get("loss/term_entropy", 0.0) == 0.0


def test_where_length_handling_cannot_apply_it_is_refused(tiny_policy_dir):
    with pytest.raises(ConfigError, match="buffer_len 30 is longer than"):
        tiny_cfg(tiny_policy_dir, "grpo", ["reward.overlong={buffer_len: 30}"])
    cfg = load_config(TrainConfig, "grpo", ["reward.overlong={buffer_len: 4}",
                                            "loss.mask_truncated=true"])
    assert {w.split(":")[0] for w in refusals(cfg)} >= {"reward.overlong",
                                                        "loss.mask_truncated=True"}
    assert [w.split(":")[0] for w in trl_refusals(cfg)] == ["reward.overlong"]
