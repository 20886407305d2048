"""The optimal token baseline against a float64 loop over its formula, its limits (equal
paths: the group mean; a group of one: the return; a convex combination of the group's
returns), sum_v pi_v^2 against a naive softmax, and the trainer's path pass against the
log-probs it already computes. (verl's own function: tests/test_verl_peers.py.)"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.advantages import PathStats, get_advantage
from lmpo.config import load_config
from lmpo.logprobs import sum_squared_probs
from lmpo.models.forward import forward_logprobs, forward_path_stats
from lmpo.trainer.train_config import TrainConfig

# the float64 references of these estimators live here (tests/test_advantage_references.py
# reads this line): per-token advantages from the policy's path statistics
ESTIMATOR_REFERENCES = ("optimal_token_baseline",)


def consistent_paths(seed: int, b: int, t: int, vocab: int = 7, weights: bool = False):
    """Log-probs and sum pi^2 of one softmax per position (so that w = ||e_a - pi||^2 >= 0),
    contiguous masks of lengths 1..t."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, t, vocab, generator=g, dtype=torch.float64) * 2
    probs = logits.softmax(-1)
    ids = torch.multinomial(probs.reshape(-1, vocab), 1, generator=g).reshape(b, t)
    logp = probs.log().gather(-1, ids[..., None]).squeeze(-1)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = (torch.arange(t)[None] < lengths[:, None]).double()
    w = torch.rand(b, t, generator=g, dtype=torch.float64) * 1.5 + 0.25 if weights else None
    return PathStats(logp, (probs ** 2).sum(-1), mask, w)


def loop_reference(scores, groups, p: PathStats, zero_tail: bool, eps: float):
    """A_{i,t} = G_i [t <= last_i] - B_t, B_t over the group's rows at t, one loop each."""
    b, t = p.mask.shape
    adv = torch.zeros(b, t, dtype=torch.float64)
    cum = torch.zeros(b, t, dtype=torch.float64)
    for i in range(b):
        run = 0.0
        for s in range(t):
            if p.mask[i, s]:
                w = 1 - 2 * float(p.logp[i, s].exp()) + float(p.sum_sq[i, s])
                if p.is_weights is not None:
                    w *= float(p.is_weights[i, s]) ** 2
                run += w
            cum[i, s] = run
    for q in set(groups.tolist()):
        rows = [i for i in range(b) if groups[i] == q]
        lengths = {i: int(p.mask[i].sum()) for i in rows}
        ordered = sorted(lengths.values())
        for i in rows:
            for s in range(int(lengths[i])):
                g_i = float(scores[i])
                if len(rows) == 1:
                    adv[i, s] = g_i
                    continue
                num = sum(float(scores[j]) * cum[j, s] for j in rows if s < lengths[j])
                den = sum(cum[j, s] for j in rows if s < lengths[j])
                base = num / (den + eps)
                if (zero_tail and lengths[i] == ordered[-1] and ordered[-1] > ordered[-2]
                        and s >= ordered[-2]):
                    base = 0.0
                adv[i, s] = g_i - base
    return adv


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("zero_tail", [True, False])
@pytest.mark.parametrize("weights", [False, True])
def test_otb_equals_a_float64_loop_over_its_formula(seed, zero_tail, weights):
    paths = consistent_paths(seed, 10, 9, weights=weights)
    scores = torch.randn(10, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 3])  # 3: a group of one
    est = get_advantage("optimal_token_baseline", handle_zero_tail=zero_tail)
    adv, metrics = est(scores, groups, paths=paths)
    assert adv.shape == (10, 9) and adv.dtype == torch.float64
    torch.testing.assert_close(adv, loop_reference(scores, groups, paths, zero_tail, 1e-8),
                               rtol=0, atol=1e-12)
    rows = (adv * paths.mask).sum(-1) / paths.mask.sum(-1)  # the metrics read row means
    assert metrics["adv/mean"] == pytest.approx(float(rows.mean()), abs=1e-12)


def test_equal_paths_and_lengths_give_the_group_mean_baseline():
    """With every response's path statistics alike, W_t is the same for the whole group:
    B_t is the group's mean return (Dr. GRPO's advantage, on every token)."""
    one = consistent_paths(3, 1, 6)
    paths = PathStats(one.logp.expand(8, 6).clone(), one.sum_sq.expand(8, 6).clone(),
                      torch.ones(8, 6, dtype=torch.float64))
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.0, 1.0, 1.0], dtype=torch.float64)
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    adv, _ = get_advantage("optimal_token_baseline", epsilon=1e-300)(scores, groups,
                                                                     paths=paths)
    means = torch.tensor([0.5] * 4 + [0.625] * 4, dtype=torch.float64)
    torch.testing.assert_close(adv, (scores - means)[:, None].expand(8, 6), rtol=0, atol=1e-14)


def test_a_group_of_one_keeps_its_return_and_padding_stays_zero():
    paths = consistent_paths(5, 3, 4)
    paths.mask[:] = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    scores = torch.tensor([0.7, -0.2, 1.5], dtype=torch.float64)
    adv, _ = get_advantage("optimal_token_baseline")(scores, torch.tensor([0, 1, 2]),
                                                     paths=paths)
    torch.testing.assert_close(adv, scores[:, None] * paths.mask, rtol=0, atol=0)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.integers(2, 6), t=st.integers(1, 8))
def test_the_baseline_is_a_convex_combination_of_the_groups_returns(seed, size, t):
    """w >= 0 (and > 0 for a softmax of finite logits), so without the zero tail B_t lies
    in [min, max] of the returns of the rows still running at t."""
    paths = consistent_paths(seed, size, t)
    scores = torch.randn(size, generator=torch.Generator().manual_seed(seed),
                         dtype=torch.float64)
    est = get_advantage("optimal_token_baseline", handle_zero_tail=False, epsilon=1e-300)
    adv, _ = est(scores, torch.zeros(size, dtype=torch.long), paths=paths)
    base = scores[:, None] - adv
    for s in range(t):
        alive = paths.mask[:, s] > 0
        if not alive.any():
            continue
        lo, hi = float(scores[alive].min()), float(scores[alive].max())
        for i in alive.nonzero().flatten().tolist():
            assert lo - 1e-9 <= float(base[i, s]) <= hi + 1e-9


def test_without_path_statistics_it_says_what_it_needs():
    with pytest.raises(ValueError, match="path statistics"):
        get_advantage("optimal_token_baseline")(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    paths = consistent_paths(0, 3, 4)
    with pytest.raises(ValueError, match=r"B = 2"):
        get_advantage("optimal_token_baseline")(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]),
                                                paths=paths)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_sum_squared_probs_equals_a_naive_softmax(dtype):
    logits = (torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0),
                          dtype=torch.float64) * 4).to(dtype)
    want = (logits.double().softmax(-1) ** 2).sum(-1)
    got = sum_squared_probs(logits, chunk_rows=4)
    tol = 1e-14 if dtype == torch.float64 else 1e-6
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_the_path_pass_gives_the_trainers_log_probs_and_sum_pi_squared(tiny_policy_dir):
    from lmpo.models import load_policy

    policy = load_policy(tiny_policy_dir)[0].eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (4, 9), generator=g)
    mask = torch.ones_like(ids)
    mask[1, -2:] = 0  # a shorter response
    resp = ids[:, -4:]
    logp, sum_sq = forward_path_stats(policy, ids, mask, resp, temperature=0.7)
    want, _ = forward_logprobs(policy, ids, mask, resp, 0.7, with_entropy=False)
    rmask = mask[:, -4:].float()
    torch.testing.assert_close(logp * rmask, want * rmask, rtol=0, atol=0)
    with torch.no_grad():
        logits = policy(input_ids=ids, attention_mask=mask).logits[:, -5:-1].double() / 0.7
    torch.testing.assert_close(sum_sq.double() * rmask, (logits.softmax(-1) ** 2).sum(-1) * rmask,
                               rtol=1e-5, atol=1e-6)


def test_a_run_computes_path_statistics_only_where_an_estimator_reads_them():
    from lmpo.trainer.advantage import wants_paths

    assert wants_paths(load_config(TrainConfig, "otb"))
    assert not wants_paths(load_config(TrainConfig, "grpo"))
    assert wants_paths(load_config(TrainConfig, "grpo", [
        "log.comparators={otb: {advantage: {name: optimal_token_baseline}}}"]))


def test_runs_with_the_estimator_and_with_it_as_a_comparator(tiny_policy_dir, tmp_path):
    """Two steps of the otb preset under a rollout correction (its weights enter W), and
    GRPO with OTB as a same-batch comparator: finite advantages, the comparator's
    advantage distance logged."""
    import json
    import math

    from lmpo.trainer.loop import train
    from tests.test_trainer import tiny_cfg

    train(tiny_cfg(tiny_policy_dir, "otb", ["steps=2", "rollout.correction={kind: tis}"]),
          tmp_path / "otb", progress=False)
    train(tiny_cfg(tiny_policy_dir, "grpo", [
        "steps=2", "log.comparators={otb: {advantage: {name: optimal_token_baseline}}}"]),
        tmp_path / "grpo", progress=False)
    for run in ("otb", "grpo"):
        rows = [json.loads(x) for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2]
        assert all(math.isfinite(r["adv/abs_mean"]) for r in rows)
    assert all(0.0 <= r["shadow/otb/adv_tv"] <= 1.0 for r in rows)


def test_the_path_pass_stands_in_for_the_recompute_bit_for_bit(tiny_policy_dir, tmp_path):
    """Under a rollout correction (a recompute every step), a run with OTB as a comparator
    takes the recompute's log-probs from the path pass: every row not about the comparator
    equals the plain run's exactly."""
    import json

    from lmpo.trainer.loop import train
    from tests.test_trainer import tiny_cfg

    base = ["steps=2", "rollout.correction={kind: tis}"]
    train(tiny_cfg(tiny_policy_dir, "grpo", base), tmp_path / "plain", progress=False)
    train(tiny_cfg(tiny_policy_dir, "grpo", [
        *base, "log.comparators={otb: {advantage: {name: optimal_token_baseline}}}"]),
        tmp_path / "shadow", progress=False)

    def rows(run):
        return [{k: v for k, v in json.loads(x).items() if not k.startswith(("time/", "shadow/"))}
                for x in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]

    assert rows("plain") == rows("shadow")
    assert "rollout/logp_mismatch" in rows("plain")[0]
