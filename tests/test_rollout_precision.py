"""Rollout precision: sampling in bfloat16 with a float32 update (the training-inference
mismatch DPPO/DRPO study), which log-probs anchor the ratio, and the mismatch metric."""

from __future__ import annotations

import json

import pytest
import torch

from lmpo.config import load_config
from lmpo.rollout import RolloutModel
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

TINY = ["steps=2", "rollout.batch_size=16", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "rollout.pool_size=32", "log.eval_per_tier=2", "log.eval_max_new_tokens=4",
        "log.tensorboard=false", "optim.minibatches=1", "log.policy_kl_every=1"]


def rows_of(policy_dir, tmp_path, name, extra):
    cfg = load_config(TrainConfig, "grpo", [f"policy={policy_dir}", *TINY, *extra])
    train(cfg, tmp_path / name, progress=False)
    return [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_bf16_copy_follows_the_policy_and_keeps_float32_buffers(tiny_policy_dir):
    from lmpo.models import load_policy

    policy, _ = load_policy(tiny_policy_dir)
    rm = RolloutModel(policy, "bfloat16")
    with torch.no_grad():
        next(policy.parameters()).add_(1.0)
    copy = rm()
    assert next(copy.parameters()).dtype == torch.bfloat16
    # the copy holds exactly the bf16 rounding of the updated float32 weights
    assert torch.equal(next(copy.parameters()), next(policy.parameters()).to(torch.bfloat16))
    assert all(b.dtype == torch.float32 for b in copy.buffers())
    assert RolloutModel(policy, "float32")() is policy


def test_float32_recompute_matches_the_rollout(tiny_policy_dir, tmp_path):
    rows = rows_of(tiny_policy_dir, tmp_path, "fp32", ["rollout.old_logp=recompute"])
    assert all(r["rollout/logp_mismatch"] < 1e-5 for r in rows)
    # without recompute, the float32 pass runs on the diagnostic steps only (1, 1+N, ...)
    plain = rows_of(tiny_policy_dir, tmp_path, "plain", ["log.policy_kl_every=2"])
    assert plain[0]["rollout/logp_mismatch"] < 1e-5 and "rollout/logp_mismatch" not in plain[1]


@pytest.mark.parametrize("old_logp", ["rollout", "recompute"])
def test_bf16_rollouts_log_the_mismatch_and_anchor_the_ratio_as_asked(tiny_policy_dir, tmp_path,
                                                                      old_logp):
    rows = rows_of(tiny_policy_dir, tmp_path, old_logp,
                   ["rollout.dtype=bfloat16", f"rollout.old_logp={old_logp}"])
    mismatch = rows[0]["rollout/logp_mismatch"]
    assert 1e-4 < mismatch < 0.1  # bf16 has 8 mantissa bits: a real, small mismatch
    # one on-policy minibatch: the ratio's only pass sees the anchor's own log-probs
    # (1 up to float32 reordering after recompute) or the bf16 ones (off by the mismatch)
    spread = abs(rows[0]["loss/ratio_max"] - 1)
    if old_logp == "recompute":
        assert spread < 1e-5
    else:
        assert spread > 1e-3


def test_kl_consecutive_measures_the_update_not_the_bf16_mismatch(tiny_policy_dir, tmp_path):
    """With lr 1e-30 the policy does not move: kl/consecutive is 0 (to float32 reordering) even
    though the bf16 anchor differs from the policy by rollout/logp_mismatch; the post-update
    displacement, which the loss sees, still carries the mismatch."""
    rows = rows_of(tiny_policy_dir, tmp_path, "frozen",
                   ["rollout.dtype=bfloat16", "rollout.old_logp=rollout", "optim.lr=1e-30"])
    assert rows[0]["rollout/logp_mismatch"] > 1e-4
    assert abs(rows[0]["kl/consecutive"]) < 1e-9
    assert rows[0]["diag/displacement_after"] > 1e-4
