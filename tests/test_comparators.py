"""Same-batch comparators (lmpo.trainer.comparators) against hand-computed values, every
registered loss as a comparator, and a run's rows bit-identical with and without them."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lmpo.config import load_config
from lmpo.losses import default_aggregation, get_loss, list_losses, loss_hparams
from lmpo.trainer.checkpoint import read_rows
from lmpo.trainer.comparators import cosine, l1_tv, stop_diff, token_weights
from lmpo.trainer.train_config import TrainConfig

N = {"num_tokens": torch.tensor(4.0), "num_seqs": torch.tensor(1.0), "horizon": 4}


def row(ratios, advs, old=0.5):
    """One sequence in float64: old_logp = log(old), logp = log(old * r) (a leaf)."""
    r = torch.tensor([ratios], dtype=torch.float64)
    old_logp = torch.full_like(r, math.log(old))
    logp = (old_logp + torch.log(r)).requires_grad_(True)
    return logp, old_logp, torch.tensor([advs], dtype=torch.float64), torch.ones_like(r)


def test_distance_conventions():
    a = torch.tensor([1.0, -2.0, 0.0])
    assert l1_tv(a, a) == 0.0 and l1_tv(a, 3 * a) == pytest.approx(0.0, abs=1e-15)
    assert cosine(a, 3 * a) == pytest.approx(1.0)
    assert l1_tv(a, -a) == pytest.approx(1.0) and cosine(a, -a) == pytest.approx(-1.0)
    assert l1_tv(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])) == 1.0  # disjoint
    zero = torch.zeros(3)
    assert l1_tv(zero, zero) == 0.0 and cosine(zero, zero) == 1.0  # both zero: identical
    assert l1_tv(a, zero) == 1.0 and cosine(a, zero) == 0.0  # only one zero: disjoint


def test_a_loss_against_itself_is_at_distance_zero():
    logp, old, adv, m = row([1.0, 1.5, 0.5, 1.05], [1.0, 1.0, -1.0, -1.0])
    fn = get_loss("cegppo")
    g = token_weights(logp, old, adv, m, fn, "token-mean", N, None)
    h = token_weights(logp, old, adv, m, get_loss("cegppo"), "token-mean", N, None)
    assert l1_tv(g.flatten(), h.flatten()) == 0.0 and cosine(g.flatten(), h.flatten()) == 1.0


def test_ppo_clip_against_reinforce_with_known_clipped_tokens():
    """token-mean over 4 tokens, eps 0.2. PPO-clip's weight -A r / 4 where the ratio is
    inside the clip range (tokens 0 and 3), 0 where clipped (token 1: r 1.5, A > 0; token
    2: r 0.5, A < 0); REINFORCE's -A / 4 everywhere. Normalised: p = [-0.25, 0, 0, 0.2625]
    / 0.5125, q = [-0.25, -0.25, 0.25, 0.25], so TV = (|p0 - q0| + 0.25 + 0.25 +
    |p3 - q3|) / 2 = 0.5 (p0, p3 exceed q0, q3 in size by 0.5 in all)."""
    logp, old, adv, m = row([1.0, 1.5, 0.5, 1.05], [1.0, 1.0, -1.0, -1.0])
    g = token_weights(logp, old, adv, m, get_loss("ppo_clip"), "token-mean", N, None)
    q = token_weights(logp, old, adv, m, get_loss("reinforce"), "token-mean", N, None)
    assert g[0].tolist() == pytest.approx([-0.25, 0.0, 0.0, 0.2625], rel=1e-12)
    assert q[0].tolist() == pytest.approx([-0.25, -0.25, 0.25, 0.25], rel=1e-12)
    assert l1_tv(g.flatten(), q.flatten()) == pytest.approx(0.5, rel=1e-12)
    dot = 0.25 * 0.25 + 0.2625 * 0.25
    want = dot / (math.sqrt(0.25 ** 2 + 0.2625 ** 2) * 0.5)
    assert cosine(g.flatten(), q.flatten()) == pytest.approx(want, rel=1e-12)


def test_a_sequence_level_loss_spreads_its_weight_over_the_sequence():
    """GSPO (seq-mean-token-mean, one sequence of 4 tokens, inside its clip range): every
    token's weight is -A s / 4 with s the sequence ratio exp(mean log r); against
    PPO-clip's per-token -A r_t / 4 the TV is that of s vs r_t, normalised."""
    ratios = [1.0001, 0.9999, 1.0002, 1.0]
    logp, old, adv, m = row(ratios, [1.0] * 4)
    n = N | {"num_tokens": torch.tensor(4.0)}
    g = token_weights(logp, old, adv, m, get_loss("gspo"), "seq-mean-token-mean", n, None)
    s = math.exp(sum(math.log(r) for r in ratios) / 4)
    assert g[0].tolist() == pytest.approx([-s / 4] * 4, rel=1e-12)
    p = token_weights(logp, old, adv, m, get_loss("ppo_clip"), "seq-mean-token-mean", n, None)
    want = 0.5 * sum(abs(0.25 - r / sum(ratios)) for r in ratios)
    assert l1_tv(g.flatten(), p.flatten()) == pytest.approx(want, rel=1e-9)


@given(st.lists(st.floats(-3, 3, allow_nan=False).filter(lambda a: abs(a) > 1e-3),
                min_size=2, max_size=12), st.floats(0.05, 0.3))
def test_on_policy_or_against_the_clip_measures_the_spread_of_abs_advantage(advs, alpha):
    """At the rollout policy (ratio 1) PPO-clip's weight is -A / n and Output Reset's
    -2 alpha sign(A) / n, so their TV is that of |A| against a uniform distribution over
    the tokens: 0 when every |A| is equal (GRPO at G = 2, whose advantages are +-1/sqrt(2)
    or 0), and the TV of the |A| profile for per-token GAE advantages. Reference in
    float64 from the advantages alone."""
    n = len(advs)
    logp, old, adv, m = row([1.0] * n, advs)
    counts = N | {"num_tokens": torch.tensor(float(n))}
    g = token_weights(logp, old, adv, m, get_loss("ppo_clip"), "token-mean", counts, None)
    o = token_weights(logp, old, adv, m, partial(get_loss("output_reset"), alpha=alpha),
                      "token-mean", counts, None)
    total = sum(abs(a) for a in advs)
    want = 0.5 * sum(abs(abs(a) / total - 1 / n) for a in advs)
    assert l1_tv(g.flatten(), o.flatten()) == pytest.approx(want, rel=1e-9, abs=1e-12)
    equal = [math.copysign(1 / math.sqrt(2), a) for a in advs]
    logp, old, adv, m = row([1.0] * n, equal)
    g = token_weights(logp, old, adv, m, get_loss("ppo_clip"), "token-mean", counts, None)
    o = token_weights(logp, old, adv, m, get_loss("output_reset"), "token-mean", counts, None)
    assert l1_tv(g.flatten(), o.flatten()) == pytest.approx(0.0, abs=1e-12)


def test_correction_weights_multiply_both_terms():
    logp, old, adv, m = row([1.0, 1.1, 0.9, 1.0], [1.0, -1.0, 1.0, -1.0])
    isw = torch.tensor([[1.0, 2.0, 0.5, 0.0]], dtype=torch.float64)
    g = token_weights(logp, old, adv, m, get_loss("reinforce"), "token-mean", N, isw)
    assert g[0].tolist() == pytest.approx([-0.25, 0.5, -0.125, 0.0], rel=1e-12)


@pytest.mark.parametrize("name", list_losses())
def test_every_registered_loss_runs_as_a_comparator(name):
    """Registry-derived: each loss's weights on a mixed batch are finite, zero off the
    mask, and at distance 0 from themselves; none raises."""
    torch.manual_seed(0)
    old = torch.log(torch.rand(3, 5, dtype=torch.float64) * 0.8 + 0.1)
    logp = (old + 0.3 * torch.randn(3, 5, dtype=torch.float64)).requires_grad_(True)
    adv = torch.tensor([1.0, -0.5, 0.0], dtype=torch.float64)[:, None].expand(3, 5)
    m = torch.ones(3, 5, dtype=torch.float64)
    m[2, 3:] = 0
    counts = {"num_tokens": m.sum(), "num_seqs": torch.tensor(3.0), "horizon": 5}
    assert loss_hparams(name) is not None
    g = token_weights(logp, old, adv, m, get_loss(name), default_aggregation(name), counts, None)
    assert torch.isfinite(g).all() and (g[m == 0] == 0).all()
    assert l1_tv(g[m > 0], g[m > 0]) == 0.0


class Stopper:
    """A controller stub that stops row r at position stops[r] (or never)."""

    needs_values = False

    def __init__(self, stops):
        self.stops = stops

    def begin_batch(self, b):
        pass

    def step(self, rows, regret, values, t):
        return torch.tensor([self.stops.get(int(r)) == t for r in rows])

    def end_batch(self, regret, lengths):
        pass


def test_stop_decisions_replayed_on_the_runs_rollout():
    """Rows: 0 stopped by the run at position 2 (length 3), 1 ended at EOS at 3 (length 4),
    2 ended at the budget (length 5), 3 stopped at 1. The comparator stops 0 at 2 (same),
    1 at its EOS position 3 (a stop at EOS is an EOS: same), 2 at 4 (differs: the run did
    not stop it), and never stops 3 (differs): 2 of 4."""
    from types import SimpleNamespace

    lengths = torch.tensor([3, 4, 5, 2])
    rollout = SimpleNamespace(response_ids=torch.zeros(4, 5, dtype=torch.long),
                              lengths=lengths, values=None, regret=torch.zeros(4, 5),
                              stop_reason=["early_stop", "eos", "length", "early_stop"])
    assert stop_diff(Stopper({0: 2, 1: 3, 2: 4}), rollout, None, None) == 0.5
    assert stop_diff(Stopper({0: 2, 3: 1}), rollout, None, None) == 0.0
    assert stop_diff(Stopper({}), rollout, None, None) == 0.5


# ---------------------------------------------------------------- in a run
TINY = ["steps=3", "rollout.batch_size=16", "rollout.max_new_tokens=8",
        "rollout.pool_size=64", "optim.minibatches=2", "log.eval_per_tier=4",
        "log.eval_every=3", "log.tensorboard=false", "log.eval_max_new_tokens=6",
        "log.policy_kl_every=2"]
COMPARATORS = ("log.comparators={ebpo: {advantage: {name: ebpo}}, cispo: {loss: {name: cispo, "
               "agg: token-mean}}, stop: {controller: {name: random_stop, hparams: "
               "{savings: 0.3}}}}")


def plain(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "shadow/"))}
            for r in rows]


def test_rows_are_bit_identical_with_and_without_comparators(sft_run, tmp_path):
    """The warm-started policy (rewards vary, EBPO's moments move), a stateful comparator
    estimator, a comparator loss, a comparator controller and the parameter-gradient
    cosine: every non-shadow metric is exactly as without them."""
    from lmpo.trainer.loop import train

    policy, _ = sft_run
    base = [f"policy={policy}", *TINY]
    train(load_config(TrainConfig, "grpo", base), tmp_path / "plain", progress=False)
    cfg = load_config(TrainConfig, "grpo", [*base, COMPARATORS, "log.shadow_grad_cos=true"])
    train(cfg, tmp_path / "shadow", progress=False)
    a, b = read_rows(tmp_path / "plain/metrics.jsonl"), read_rows(tmp_path / "shadow/metrics.jsonl")
    assert plain(a) == plain(b)
    for r in b:
        for name in ("ebpo", "cispo"):
            assert 0.0 <= r[f"shadow/{name}/weight_tv"] <= 1.0
            assert -1.0 <= r[f"shadow/{name}/weight_cos"] <= 1.0
        assert 0.0 <= r["shadow/ebpo/adv_tv"] <= 1.0 and 0.0 <= r["shadow/stop/stop_diff"] <= 1
        assert r["shadow/stop/weight_tv"] == 0.0  # a controller leaves the update's weights
    assert [("shadow/cispo/grad_cos" in r) for r in b] == [True, False, True]  # steps 1, 3
    assert all(-1 <= r["shadow/cispo/grad_cos"] <= 1 for r in (b[0], b[2]))
    assert any(r["shadow/cispo/weight_tv"] > 0 for r in b)


def test_a_bad_comparator_is_a_clear_error(tiny_policy_dir):
    from lmpo.errors import ConfigError

    for spec, msg in [("{x: {loss: {name: nope}}}", r"log.comparators.x: unknown loss 'nope'"),
                      ("{x: {optimizer: {}}}", r"log.comparators.x must map some of"),
                      ("{x: {advantage: {name: gae}}}", r"needs the critic's values")]:
        with pytest.raises(ConfigError, match=msg):  # load_config validates
            load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}",
                                              f"log.comparators={spec}"])


def test_a_controller_that_scores_stops_otherwise_is_measured_on_the_update(sft_run,
                                                                             tmp_path):
    """ESPO's stop-scoring ablations stop alike and score a stop otherwise: the comparator
    replays the same stops (stop_diff 0) and rescores the stopped responses its way with a
    copy of the run's estimator, so weight_tv and adv_tv measure the change; the run's own
    rows are bit-identical with and without it."""
    from lmpo.trainer.loop import train

    policy, _ = sft_run
    stop = "{name: random_stop, hparams: {savings: 0.4, r_fail: %s}}"
    base = [f"policy={policy}", *TINY, f"controller={stop % '-1.0'}"]
    train(load_config(TrainConfig, "grpo", base), tmp_path / "plain", progress=False)
    cfg = load_config(TrainConfig, "grpo", [
        *base, "log.comparators={zero: {controller: " + stop % "0.0" + "}, same: "
        "{controller: " + stop % "-1.0" + "}}"])
    train(cfg, tmp_path / "shadow", progress=False)
    a, b = read_rows(tmp_path / "plain/metrics.jsonl"), read_rows(tmp_path / "shadow/metrics.jsonl")
    assert plain(a) == plain(b)
    assert all(r["shadow/zero/stop_diff"] == 0.0 and r["shadow/same/stop_diff"] == 0.0
               for r in b)
    assert all(r["shadow/same/weight_tv"] == 0.0 and "shadow/same/adv_tv" not in r for r in b)
    assert any(r["espo/stop_rate"] > 0 for r in b)
    assert all(0.0 <= r["shadow/zero/weight_tv"] <= 1.0 for r in b)
    assert any(r["shadow/zero/weight_tv"] > 0 and r["shadow/zero/adv_tv"] > 0 for r in b)
