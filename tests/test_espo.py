"""ESPO: causality of stop decisions, batch-frozen statistics, the no-op cases, the
fixed (or opt-in adaptive) beta, the relative warm-up, variant F's token savings and
state round trips."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lmpo.models import ValueModel, build_policy, build_tokenizer
from lmpo.rollout import ESPO, IncrementalValues, RandomStop, build_controller, sample


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


def simulate(stopper, steps, rows=200, natural=20):
    """Batches of `rows` sequences of natural length `natural`; returns per-step rows."""
    out = []
    for step in range(1, steps + 1):
        stopper.begin_batch(rows)
        alive = torch.arange(rows)
        lengths = torch.full((rows,), natural)
        for t in range(natural):
            stop = stopper.step(alive, torch.zeros(len(alive)), None, t)
            lengths[alive[stop]] = t + 1
            alive = alive[~stop]
        stopper.end_batch(torch.zeros(rows, natural), lengths)
        row = {"tokens/generated": float(lengths.sum()),
               "espo/would_be_extra_tokens": float((natural - lengths).sum())}
        stopper.observe(row, step)
        out.append(row)
    return out


def test_variant_f_matches_a_savings_fraction():
    """Random stopping at 25% token savings: the measured cumulative savings (the tokens
    the stopped copies would still have generated) end within 0.01 of the target."""
    stopper = RandomStop(savings=0.25, seed=0)
    simulate(stopper, 80)
    assert stopper.savings == pytest.approx(0.25, abs=0.01)
    assert stopper.metrics()["espo/savings_cum"] == stopper.savings


def test_variant_f_tracks_a_reference_runs_token_curve(tmp_path):
    """The reference ESPO run generated 3,000 tokens per step (vs 4,000 unstopped): the
    random arm's cumulative tokens track that curve, and past its end its last rate."""
    ref = tmp_path / "espo_run"
    ref.mkdir()
    (ref / "metrics.jsonl").write_text("".join(
        json.dumps({"step": k, "tokens/cumulative": 3000.0 * k}) + "\n" for k in range(1, 61)))
    stopper = RandomStop(reference=str(ref), seed=1)
    rows = simulate(stopper, 80)
    cum = sum(r["tokens/generated"] for r in rows)
    assert cum == pytest.approx(3000.0 * 80, rel=0.03)
    assert stopper.target_tokens(80) == 3000.0 * 80
    # the gap to the reference's curve at this step, for a claim held at every step
    assert stopper.metrics()["espo/reference_gap"] == pytest.approx(
        abs(cum - 3000.0 * 80) / (3000.0 * 80), rel=1e-9)
    assert "espo/reference_gap" not in RandomStop(savings=0.2).metrics()


def test_variant_f_as_a_comparator_tracks_the_run_it_rides_on():
    """reference "@run" (a same-batch comparator on ESPO's own run): the target at each
    step is the run's own tokens/cumulative in the row it observes (here 3,000 a step,
    the curve the run has made so far, not a file)."""
    stopper = RandomStop(reference="@run", seed=1)
    original = stopper.observe

    def observe(row, step):  # the run's row carries its own cumulative tokens
        original(row | {"tokens/cumulative": 3000.0 * step}, step)

    stopper.observe = observe
    rows = simulate(stopper, 80)
    cum = sum(r["tokens/generated"] for r in rows)
    assert cum == pytest.approx(3000.0 * 80, rel=0.03)
    assert stopper.metrics()["espo/reference_gap"] == pytest.approx(
        abs(cum - 3000.0 * 80) / (3000.0 * 80), rel=1e-9)


def test_variant_f_stops_at_random_whatever_the_sequence():
    a, b = RandomStop(savings=0.3, hazard=0.2, seed=5), RandomStop(savings=0.3, hazard=0.2, seed=5)
    for e in (a, b):
        e.begin_batch(50)
    rows = torch.arange(50)
    da = a.step(rows, torch.zeros(50), None, 3)
    db = b.step(rows, torch.full((50,), 99.0), torch.full((50,), -1.0), 3)
    assert torch.equal(da, db) and 0 < int(da.sum()) < 50


def test_variant_f_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="exactly one target"):
        RandomStop()
    with pytest.raises(ValueError, match="exactly one target"):
        RandomStop(savings=0.2, reference=str(tmp_path))
    unresolved = RandomStop(reference="@espo")  # an experiment's arm: lmpo compare resolves
    with pytest.raises(ValueError, match="names an experiment's arm"):
        unresolved.target_tokens(1)
    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1, "tokens/cumulative": 10}\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2: not a metrics row"):
        RandomStop(reference=str(bad))
    assert isinstance(build_controller("random_stop", {"savings": 0.2}, total_steps=10, seed=0),
                      RandomStop)
    with pytest.raises(TypeError, match=r"unknown hyper-parameter\(s\) \['beta'\]"):
        build_controller("random_stop", {"savings": 0.2, "beta": 3.0})
    with pytest.raises(ValueError, match="set measure_false_positives=true"):
        RandomStop(savings=0.2, measure_false_positives=False)
    none = build_controller("none", total_steps=10, seed=0)
    assert none.stop_score is None and not none.needs_values and none.state_dict() == {}


def test_beta_is_fixed_unless_adaptive_is_asked_for():
    fixed = primed(beta=1.5)
    fixed.begin_batch(4)
    fixed._stopped[:] = True
    fixed.end_batch(torch.ones(4, 3), torch.full((4,), 3))
    assert fixed.beta == 1.5 and fixed.last_stop_rate == 1.0


def test_adaptive_beta_moves_toward_the_target_rate():
    e = primed(beta=1.0, beta_lr=0.5, adapt_beta=True)
    assert e.beta == pytest.approx(1.0 + 0.5 * (0.0 - 0.25))  # nothing stopped: beta down
    e.begin_batch(4)
    e._stopped[:] = True  # everything stopped: rate 1 > 0.25 -> beta up
    e.end_batch(torch.ones(4, 3), torch.full((4,), 3))
    assert e.beta == pytest.approx(0.875 + 0.5 * 0.75)


@pytest.mark.parametrize("scale", [1.0, 1000.0, 1e-3])
def test_warmup_is_relative_so_it_means_the_same_at_any_scale(scale):
    """Baseline = the first value loss (1.0 x scale). A step is calm when the loss is
    <= 50% of it and moved <= 20% from the step before; 3 calm steps in a row switch
    stopping on. The same trace at any scale switches on at the same step."""
    e = ESPO(total_steps=1000)
    trace = [1.0, 0.9, 0.8, 0.44, 0.42, 0.40, 0.60, 0.41, 0.40, 0.39, 0.38]
    on = None
    for step, loss in enumerate(trace, start=1):
        e.observe({"value/loss": loss * scale}, step)
        if e.warmed and on is None:
            on = step
    # 0.44: below 0.45 but a 45% drop; 0.42, 0.40 calm; 0.60 breaks it; 0.41 (a 32% move)
    # no; 0.40, 0.39, 0.38 calm -> on at step 11
    assert on == 11 and e.warmed_at == 11 and e.metrics()["espo/warmed_at"] == 11


def test_warmup_is_forced_on_after_a_tenth_of_the_run():
    f = ESPO(total_steps=100)
    for step in range(1, 10):
        f.observe({"value/loss": 10.0 * step}, step)
    assert not f.warmed and f.metrics()["espo/warmed_at"] == -1
    f.observe({"value/loss": 999.0}, 10)
    assert f.warmed and f.warmed_at == 10


def test_state_round_trip():
    e = ESPO(total_steps=100)
    for step, loss in enumerate([0.5, 0.4, 0.3, 0.1], start=1):
        e.observe({"value/loss": loss, "tokens/generated": 40.0,
                   "espo/would_be_extra_tokens": 3.0}, step)
    f = ESPO()
    f.load_state_dict(e.state_dict())
    assert f.state_dict() == e.state_dict()
    r = RandomStop(savings=0.2, seed=3)
    simulate(r, 3)
    q = RandomStop(savings=0.2, seed=9)
    q.load_state_dict(r.state_dict())
    assert q.hazard == r.hazard and q.savings == r.savings
    assert torch.equal(torch.rand(3, generator=q.gen), torch.rand(3, generator=r.gen))


def test_modes_and_value_requirement():
    with pytest.raises(ValueError, match="valid modes: full, regret_only, value_only"):
        ESPO(mode="oracle")
    e = primed(beta=0.1)
    e.begin_batch(1)
    with pytest.raises(ValueError, match="needs per-step values"):
        e.step(torch.arange(1), torch.ones(1), None, 0)
    r = primed(mode="regret_only", beta=0.1)
    r.begin_batch(1)
    assert r.step(torch.arange(1), torch.full((1,), 50.0), None, 0).tolist() == [True]


def test_false_positive_diagnostic_finishes_stopped_copies(sft_run):
    """Greedy rollouts of the warm-started policy on its solved tier, randomly stopped:
    finishing each stopped copy greedily must reproduce the unstopped greedy completion,
    so every stop is a false positive and the would-be lengths are the true lengths."""
    import random

    from lmpo.models import load_policy
    from lmpo.rewards import Reward
    from lmpo.rollout import RolloutContext
    from lmpo.rollout.controllers import finish_stopped
    from lmpo.tasks import get_task

    policy, tok = load_policy(sft_run[0])
    task = get_task("chain_sum")
    problems = task.sample(32, random.Random(0), cluster="t2d1")
    prompts = [tok.encode(p.prompt) for p in problems]
    kw = {"max_new_tokens": 12, "temperature": 0.0, "eos_token_id": tok.eos_token_id,
          "pad_token_id": tok.pad_token_id}
    full = sample(policy, prompts, **kw)
    stopper = RandomStop(savings=0.5, hazard=0.3, seed=0)
    r = sample(policy, prompts, stopper=stopper, **kw)
    stopped = [i for i, s in enumerate(r.stop_reason) if s == "early_stop"]
    assert len(stopped) >= 5
    diag = finish_stopped(RolloutContext(
        policy=policy, tokenizer=tok, problems=problems, rollout=r, max_new_tokens=12,
        temperature=0.0, seed=0, reward=Reward("task", task), eos_ids=[tok.eos_token_id]))
    texts = [tok.decode(full.response_ids[i, :int(full.lengths[i])], skip_special_tokens=True)
             for i in stopped]
    solved = [float(task.is_correct(problems[i], t)) for i, t in zip(stopped, texts, strict=True)]
    assert diag["espo/false_positive_rate"] == pytest.approx(sum(solved) / len(solved))
    assert sum(solved) / len(solved) >= 0.9  # the tier is solved: these stops were wrong
    assert diag["espo/would_be_length_mean"] == pytest.approx(
        float(full.lengths[stopped].float().mean()))
    assert diag["espo/would_be_extra_tokens"] == float(
        (full.lengths[stopped] - r.lengths[stopped]).sum())
