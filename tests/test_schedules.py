"""Coefficient schedules (lmpo.trainer.schedules): verl's adaptive KL controller and TRL's
adaptive entropy control against their rules written out, the KL they observe, runs that
use them (in the loss and in the reward), and the refusals. Against verl 0.9.1's own
controller and `apply_kl_penalty`: tests/test_verl_peers.py. Resume after a kill:
tests/test_resume.py."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lmpo.config import ConfigError
from lmpo.trainer.loop import train
from lmpo.trainer.metric_names import declared, logs
from lmpo.trainer.schedules import SCHEDULES, mean_response_kl
from tests.test_trainer import tiny_cfg


def test_adaptive_kl_follows_the_proportional_rule():
    kl = SCHEDULES.get("adaptive_kl", target_kl=0.1, horizon=100.0)
    kl.value, want = 0.2, 0.2
    for current, n in [(0.1, 16), (0.5, 16), (0.0, 8), (0.11, 32), (1e-9, 1)]:
        kl.update(current, n)
        error = max(-0.2, min(0.2, current / 0.1 - 1.0))  # numpy's clip, as verl
        want *= 1.0 + error * n / 100.0
        assert kl.value == pytest.approx(want, rel=1e-15)
    assert kl.state_dict() == {"value": kl.value}


def test_adaptive_entropy_follows_trls_rule_and_gates_the_bonus():
    """TRL's `_compute_loss` written out: the coefficient applied in a step is the one
    left by the previous step, and only when the entropy seen then was <= the target
    (none seen yet: no bonus); the update moves it by delta within [min, max]."""
    ent = SCHEDULES.get("adaptive_entropy", target=0.5, delta=0.1, coef_min=0.05,
                        coef_max=0.25)
    ent.value = 0.1
    coef, last, applied = 0.1, math.inf, []
    for h in [0.7, 0.4, 0.3, 0.2, 0.9, 0.45, 0.6, 0.6, 0.6]:
        applied.append(ent.applied())
        want_applied = coef if last <= 0.5 else 0.0
        assert applied[-1] == want_applied
        ent.update(h)
        coef = min(coef + 0.1, 0.25) if h <= 0.5 else max(coef - 0.1, 0.05)
        last = h
        assert ent.value == pytest.approx(coef, abs=1e-15)
    assert applied[0] == 0.0 and max(applied) == pytest.approx(0.25)  # the cap binds
    assert ent.value == pytest.approx(0.05)  # and the floor


def test_the_observed_kl_is_the_mean_over_responses_of_each_response_s_mean():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.3, 0.0], [-1.0, 0.0, 0.0]],
                       dtype=torch.float64)
    ref = torch.tensor([[-1.5, -1.0, -0.7], [-0.1, -0.9, 0.0], [-2.0, 0.0, 0.0]],
                       dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]], dtype=torch.float64)
    row0 = ((-1.0 + 1.5) + (-2.0 + 1.0) + (-0.5 + 0.7)) / (3 + 1e-8)
    row1 = ((-0.3 + 0.1) + (-0.3 + 0.9)) / (2 + 1e-8)
    want = (row0 + row1 + 0.0) / 3  # an empty response counts as 0, as in verl
    assert mean_response_kl(old, ref, mask, "k1") == pytest.approx(want, rel=1e-14)
    k3 = [[math.exp(r - o) - (r - o) - 1 for o, r in zip(a, b, strict=True)]
          for a, b in zip(old.tolist(), ref.tolist(), strict=True)]
    want3 = sum(sum(v * m for v, m in zip(row, mrow, strict=True)) /
                (sum(mrow) + 1e-8) for row, mrow in zip(k3, mask.tolist(), strict=True)) / 3
    assert mean_response_kl(old, ref, mask, "k3") == pytest.approx(want3, rel=1e-12)


def rows_of(run_dir):
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("preset,mode", [("grpo", "loss"), ("ppo_clip", "reward")])
def test_an_adaptive_kl_run_moves_its_coefficient_by_the_rule(preset, mode, tiny_policy_dir,
                                                              tmp_path):
    cfg = tiny_cfg(tiny_policy_dir, preset, [
        "steps=3", "kl.coef=0.05", f"kl.mode={mode}",
        "kl.schedule={name: adaptive_kl, hparams: {target_kl: 1.0e-6, horizon: 40}}"])
    train(cfg, tmp_path / "run", progress=False)
    rows = rows_of(tmp_path / "run")
    assert rows[0]["schedule/kl_coef"] == 0.05
    for before, after in zip(rows, rows[1:], strict=False):
        error = max(-0.2, min(0.2, before["schedule/kl_observed"] / 1e-6 - 1))
        n = cfg.rollout.batch_size
        assert after["schedule/kl_coef"] == pytest.approx(
            before["schedule/kl_coef"] * (1 + error * n / 40), rel=1e-12)
    assert rows[-1]["schedule/kl_coef"] != 0.05  # it moved
    assert all(logs(declared(cfg), k) for r in rows for k in r)


def test_an_adaptive_entropy_run_starts_the_bonus_when_entropy_falls_to_target(
        tiny_policy_dir, tmp_path):
    cfg = tiny_cfg(tiny_policy_dir, "grpo", [
        "steps=3", "optim.minibatches=2", "optim.entropy_coef=0.0",
        "optim.entropy_schedule={name: adaptive_entropy, hparams: {target: 100.0, "
        "delta: 0.01}}"])
    train(cfg, tmp_path / "run", progress=False)
    rows = rows_of(tmp_path / "run")
    # every entropy is below a target of 100 nats: +0.01 per optimiser step, 2 a step
    assert [r["schedule/entropy_coef"] for r in rows] == pytest.approx([0.02, 0.04, 0.06])
    assert all(0 < r["schedule/entropy_observed"] < 100 for r in rows)
    assert rows[0]["loss/term_entropy"] != 0.0  # the bonus acted from the second minibatch


@pytest.mark.parametrize("override,says", [
    ("kl.schedule={name: adaptive_entropy}", "unknown kl.schedule.name 'adaptive_entropy'"),
    ("optim.entropy_schedule={name: adaptive_kl}", "valid: adaptive_entropy, fixed"),
    ("kl.schedule={name: adaptive_kl, hparams: {target_kl: 0}}", "target_kl=0 is outside"),
    ("kl.schedule={name: adaptive_kl, hparams: {horizon_steps: 5}}", "valid ones: target_kl"),
    ("optim.entropy_schedule={name: adaptive_entropy, hparams: {coef_min: 2}}",
     "coef_min <= coef_max"),
])
def test_a_bad_schedule_fails_in_one_line_before_any_work(override, says, tiny_policy_dir,
                                                          tmp_path):
    with pytest.raises(ConfigError) as err:
        train(tiny_cfg(tiny_policy_dir, "grpo", ["steps=1", "kl.coef=0.1", override]),
              tmp_path / "run", progress=False)
    assert says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="it needs kl.coef > 0"):  # nothing to move
        tiny_cfg(tiny_policy_dir, "grpo", ["kl.schedule={name: adaptive_kl}"])
    # verl's factor 1 - 0.2 n / horizon is negative for horizon < 0.2 n: refused
    with pytest.raises(ConfigError, match=r"horizon 1 must exceed 0.2 x rollout.batch_size"):
        tiny_cfg(tiny_policy_dir, "grpo", ["kl.coef=0.1", "kl.schedule={name: adaptive_kl, "
                                                          "hparams: {horizon: 1}}"])
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
