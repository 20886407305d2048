"""ESPO: causality of stop decisions, batch-frozen statistics, the no-op cases,
the random ablation's stop rate, warm-up and state round trips."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.models import ValueModel, build_policy, build_tokenizer
from lmpo.rollout import ESPO, IncrementalValues, sample


def primed(**kw) -> ESPO:
    e = ESPO(warmup=False, **kw)
    e.begin_batch(4)
    e.end_batch(torch.tensor([[0.0, 1.0, 2.0, 1.0]] * 4), torch.full((4,), 4))
    return e


def decisions(e: ESPO, regret_rows: torch.Tensor, values: torch.Tensor):
    e.begin_batch(regret_rows.shape[0])
    rows = torch.arange(regret_rows.shape[0])
    return torch.stack([e.step(rows, regret_rows[:, t], values[:, t], t)
                        for t in range(regret_rows.shape[1])], 1)


def test_decision_at_t_depends_only_on_the_past():
    e = primed(beta=0.3, adapt_beta=False)
    g = torch.Generator().manual_seed(0)
    base = torch.rand(6, 10, generator=g) * 4
    vals = torch.rand(6, 10, generator=g)
    cut = 5
    other = base.clone()
    other[:, cut + 1:] = torch.rand(6, 4, generator=g) * 40  # a wildly different future
    va = vals.clone()
    va[:, cut + 1:] = -5.0
    d1, d2 = decisions(e, base, vals), decisions(e, other, va)
    assert torch.equal(d1[:, : cut + 1], d2[:, : cut + 1])
    assert not torch.equal(d1, d2)  # the future does change later decisions


def test_statistics_are_frozen_within_a_batch():
    e = primed(beta=0.5)
    before = (e.mu_g, e.var_g, e.beta)
    e.begin_batch(3)
    for t in range(5):
        e.step(torch.arange(3), torch.full((3,), 9.0), torch.zeros(3), t)
        assert (e.mu_g, e.var_g, e.beta) == before
    e.end_batch(torch.full((3, 5), 9.0), torch.full((3,), 5))
    assert e.mu_g == pytest.approx(0.99 * 1.0 + 0.01 * 9.0)
    assert e.var_g == pytest.approx(0.99 * 0.5 + 0.01 * 0.0)


def test_hand_computed_stop_rule():
    e = primed(beta=2.0, adapt_beta=False, alpha_s=0.5, eps_v=0.2)  # mu 1, var 0.5
    e.begin_batch(2)
    g1 = (3.0 - 1.0) / math.sqrt(0.5 + 1e-8)  # 2.83
    stop = e.step(torch.arange(2), torch.tensor([3.0, 3.0]), torch.tensor([1.0, -3.0]), 0)
    # z = 0.5 * g1 = 1.41: row 0 gate 2 * 1.0 = 2 (no stop), row 1 gate 2 * 0.2 = 0.4 (stop)
    assert stop.tolist() == [False, True]
    assert float(e._z[0]) == pytest.approx(0.5 * g1, rel=1e-6)


@pytest.fixture(scope="module")
def policy_and_tok():
    tok = build_tokenizer()
    return build_policy("nano", tok, seed=2).eval(), tok


def run(policy, tok, stopper, value_fn=None, seed=0):
    prompts = [tok.encode(p) for p in ["1+2=", "33-4=", "5*6*7="] * 8]
    return sample(policy, prompts, max_new_tokens=16, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(seed),
                  value_fn=value_fn, stopper=stopper)


@pytest.mark.parametrize("kw", [{"warmup": True}, {"warmup": False, "beta": math.inf}])
def test_inactive_espo_reproduces_plain_sampling(policy_and_tok, kw):
    policy, tok = policy_and_tok
    critic = IncrementalValues(ValueModel.from_policy(policy))
    stopper = ESPO(**kw)
    stopper.mu_g, stopper.var_g = 0.0, 1.0  # statistics present: only the gate stops it
    plain = run(policy, tok, None)
    gated = run(policy, tok, stopper, critic)
    assert torch.equal(plain.response_ids, gated.response_ids)
    assert "early_stop" not in gated.stop_reason


def test_active_espo_stops_rows_in_flight(policy_and_tok):
    policy, tok = policy_and_tok
    critic = ValueModel.from_policy(policy)  # zero head: V = 0, gate = beta * eps_v
    stopper = ESPO(warmup=False, beta=2.0, adapt_beta=False)
    run(policy, tok, stopper, IncrementalValues(critic), seed=1)  # batch 1 sets the statistics
    r = run(policy, tok, stopper, IncrementalValues(critic), seed=2)
    stopped = [i for i, s in enumerate(r.stop_reason) if s == "early_stop"]
    assert 0 < len(stopped) < len(r.stop_reason)
    assert r.num_generated == int(r.response_mask.sum())
    assert stopper.last_stop_rate == pytest.approx(len(stopped) / len(r.stop_reason))


def test_random_mode_hits_its_target_rate():
    """Fixed natural length 20, 40 batches of 500 rows: realised rate 0.25 +- 0.02."""
    e = ESPO(mode="random", warmup=False, target_rate=0.25, seed=0)
    e.natural_length = 20.0
    stopped = total = 0
    for _ in range(40):
        e.begin_batch(500)
        alive = torch.arange(500)
        lengths = torch.full((500,), 20)
        for t in range(20):
            stop = e.step(alive, torch.zeros(len(alive)), None, t)
            lengths[alive[stop]] = t + 1
            alive = alive[~stop]
        e.end_batch(torch.zeros(500, 20), lengths)
        stopped += 500 - len(alive)
        total += 500
    assert abs(stopped / total - 0.25) < 0.02


def test_beta_moves_toward_the_target_rate():
    e = primed(beta=1.0, beta_lr=0.5)
    assert e.beta == pytest.approx(1.0 + 0.5 * (0.0 - 0.25))  # nothing stopped: beta down
    e.begin_batch(4)
    e._stopped[:] = True  # everything stopped: rate 1 > 0.25 -> beta up
    e.end_batch(torch.ones(4, 3), torch.full((4,), 3))
    assert e.beta == pytest.approx(0.875 + 0.5 * 0.75)


def test_warmup_gate_and_force_on():
    e = ESPO(total_steps=100)
    for step, loss in enumerate([3.0, 2.0, 0.4, 0.3], start=1):
        e.observe_value_loss(loss, step)
    assert not e.warmed  # only two calm steps so far
    e.observe_value_loss(0.2, 5)
    assert e.warmed
    f = ESPO(total_steps=100)
    for step in range(1, 10):
        f.observe_value_loss(10.0 * step, step)
    assert not f.warmed
    f.observe_value_loss(999.0, 10)  # 10% of total steps
    assert f.warmed


def test_state_round_trip():
    e = primed(mode="random")
    e.observe_value_loss(0.1, 1)
    f = ESPO()
    f.load_state_dict(e.state_dict())
    assert f.state_dict().keys() == e.state_dict().keys()
    for k in ESPO._STATE:
        assert getattr(f, k) == getattr(e, k)
    assert torch.equal(torch.rand(3, generator=f.gen), torch.rand(3, generator=e.gen))


def test_modes_and_value_requirement():
    with pytest.raises(ValueError, match="valid modes: full, regret_only"):
        ESPO(mode="oracle")
    e = primed(beta=0.1)
    e.begin_batch(1)
    with pytest.raises(ValueError, match="needs per-step values"):
        e.step(torch.arange(1), torch.ones(1), None, 0)
    r = primed(mode="regret_only", beta=0.1, beta_min=0.01, adapt_beta=False)
    r.begin_batch(1)
    assert r.step(torch.arange(1), torch.full((1,), 50.0), None, 0).tolist() == [True]


def test_false_positive_diagnostic_finishes_stopped_copies(sft_run):
    """Greedy rollouts of the warm-started policy on its solved tier, randomly stopped:
    finishing each stopped copy greedily must reproduce the unstopped greedy completion,
    so every stop is a false positive and the would-be lengths are the true lengths."""
    import random

    from lmpo.models import load_policy
    from lmpo.tasks import get_task
    from lmpo.trainer.batch import finish_stopped

    policy, tok = load_policy(sft_run[0])
    task = get_task("chain_sum")
    problems = task.sample(32, random.Random(0), cluster="t2d1")
    prompts = [tok.encode(p.prompt) for p in problems]
    kw = {"max_new_tokens": 12, "temperature": 0.0, "eos_token_id": tok.eos_token_id,
          "pad_token_id": tok.pad_token_id}
    full = sample(policy, prompts, **kw)
    stopper = ESPO(mode="random", warmup=False, target_rate=0.6, seed=0)
    stopper.natural_length = 3.0
    r = sample(policy, prompts, stopper=stopper, **kw)
    stopped = [i for i, s in enumerate(r.stop_reason) if s == "early_stop"]
    assert len(stopped) >= 5
    diag = finish_stopped(policy, tok, task, problems, r, max_new_tokens=12, temperature=0.0,
                          seed=0)
    solved = [task.score(problems[i], tok.decode(full.response_ids[i, :int(full.lengths[i])],
                                                 skip_special_tokens=True)) for i in stopped]
    assert diag["espo/false_positive_rate"] == pytest.approx(sum(solved) / len(solved))
    assert sum(solved) / len(solved) >= 0.9  # the tier is solved: these stops were wrong
    assert diag["espo/would_be_length_mean"] == pytest.approx(
        float(full.lengths[stopped].float().mean()))
