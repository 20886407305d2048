"""Stale rollouts (`rollout.staleness: k`): responses sampled by the policy as it was k
training steps back, with that policy's behaviour log-probs; checkpointed, so a resumed
run equals the uninterrupted one; k = 0 keeps the on-policy path (no copy, no history)."""

from __future__ import annotations

import json

import pytest
import torch

import lmpo.trainer.stages as stages
from lmpo.config import load_config
from lmpo.models import load_policy
from lmpo.models.forward import forward_logprobs
from lmpo.trainer.checkpoint import load_checkpoint
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

TINY = ["rollout.batch_size=16", "rollout.group_size=4", "rollout.max_new_tokens=8",
        "rollout.pool_size=32", "log.eval_per_tier=2", "log.eval_max_new_tokens=4",
        "log.tensorboard=false", "log.checkpoint_every=1", "log.keep_checkpoints=10",
        "optim.lr=1e-3", "log.eval_every=100"]


def config(policy, *extra):
    return load_config(TrainConfig, "grpo", [f"policy={policy}", *TINY, *extra])


def rows(run_dir):
    """The metrics rows, wall times and held-out evaluations aside (a run evaluates at its
    last step: a shorter first leg evaluates where the uninterrupted run does not)."""
    return [{k: v for k, v in json.loads(x).items() if not k.startswith(("time/", "eval/"))}
            for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_behaviour_logprobs_are_those_of_the_policy_two_steps_back(tiny_policy_dir, tmp_path,
                                                                   monkeypatch):
    seen = []
    real = stages.sample

    def recording(model, prompts, **kw):
        r = real(model, prompts, **kw)
        seen.append(r)
        return r

    monkeypatch.setattr(stages, "sample", recording)
    run = tmp_path / "stale"
    train(config(tiny_policy_dir, "steps=5", "rollout.staleness=2"), run, progress=False)
    policy, _ = load_policy(tiny_policy_dir)
    for step, r in enumerate(seen, start=1):
        version = max(0, step - 1 - 2)  # the policy after `version` updates
        if version:
            state = load_checkpoint(run / "checkpoints" / f"ckpt-{version:06d}.pt")
            policy.load_state_dict(state["policy"])
        ids, mask = r.full_sequences()
        with torch.no_grad():
            want, _ = forward_logprobs(policy, ids, mask, r.response_ids, with_entropy=False)
        m = r.response_mask.bool()
        assert (r.logp - want).abs()[m].max() < 2e-5, step
    # the policy moved: the version the step started from would not have matched
    latest = load_checkpoint(run / "checkpoints" / "ckpt-000004.pt")["policy"]
    policy.load_state_dict(latest)
    ids, mask = seen[4].full_sequences()
    with torch.no_grad():
        fresh, _ = forward_logprobs(policy, ids, mask, seen[4].response_ids, with_entropy=False)
    assert (seen[4].logp - fresh).abs()[seen[4].response_mask.bool()].max() > 1e-3
    logged = rows(run)
    assert all(r["rollout/logp_mismatch"] > 0 for r in logged[3:])  # stale vs current
    assert logged[0]["rollout/logp_mismatch"] < 1e-5  # step 1 samples with version 0


def test_a_resumed_stale_run_equals_the_uninterrupted_one(tiny_policy_dir, tmp_path):
    train(config(tiny_policy_dir, "steps=5", "rollout.staleness=2"), tmp_path / "full",
          progress=False)
    train(config(tiny_policy_dir, "steps=3", "rollout.staleness=2"), tmp_path / "part",
          progress=False)
    train(config(tiny_policy_dir, "steps=5", "rollout.staleness=2"), tmp_path / "part",
          resume=True, progress=False)
    assert rows(tmp_path / "part") == rows(tmp_path / "full")


def test_staleness_zero_samples_with_the_live_policy(tiny_policy_dir, tmp_path):
    from lmpo.rollout import RolloutModel

    policy, _ = load_policy(tiny_policy_dir)
    rm = RolloutModel(policy, "float32", staleness=0)
    assert rm() is policy and not rm.differs
    stale = RolloutModel(policy, "float32", staleness=1)
    assert stale() is not policy and stale.differs
    ckpt = tmp_path / "zero"
    train(config(tiny_policy_dir, "steps=1"), ckpt, progress=False)
    assert load_checkpoint(ckpt / "checkpoints" / "ckpt-000001.pt")["history"] is None


def test_a_checkpoint_of_another_staleness_is_refused(tiny_policy_dir, tmp_path):
    from lmpo.trainer.checkpoint import CheckpointError
    from lmpo.trainer.history import PolicyHistory

    policy, _ = load_policy(tiny_policy_dir)
    h = PolicyHistory(2)
    for _ in range(4):
        h.advance(policy)
    assert len(h.versions) == 3 and h.lag == 2
    with pytest.raises(CheckpointError, match="staleness 2, this run 1"):
        PolicyHistory(1).load_state_dict(h.state_dict())
