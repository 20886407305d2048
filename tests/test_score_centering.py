"""Score centering (`loss.centered_score`, arXiv 2609.20807): the coefficients against
hand-computed and float64 references; on-policy the exact term has zero gradient; the
centered score has zero mean under the sampler for any pi; the paper's proportional tail
is exact when the sampler's tail is proportional to pi and equals the full version with
nothing outside the head; the sampler's head read teacher-forced equals its softmax; a
run with an on-policy float32 sampler takes the same step with and without centering, a
low-precision one a different step; the top-k bias against the exact version on the
testbed's model shrinks with k; and what it cannot compose with is refused by name."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.config import ConfigError
from lmpo.losses import centered_term, centering_coefficients
from lmpo.losses.centering import centering_gradient
from lmpo.masked import position_ids
from lmpo.models import load_policy
from lmpo.models.forward import ALL, behaviour_head, forward_logprobs
from lmpo.rollout import RolloutModel
from tests.test_precision import rollout_gap


def grad_of_expected(coef: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """d/dz of sum_v c_v log softmax(z)_v, float64."""
    z = z.clone().requires_grad_(True)
    (coef * torch.log_softmax(z, -1)).sum().backward()
    return z.grad


def test_the_hand_example():
    """p = (0.6, 0.4), q = (0.5, 0.5): q's expected score is q - p = (-0.1, +0.1)."""
    z = torch.log(torch.tensor([0.6, 0.4], dtype=torch.float64))
    q_logp = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))
    coef, alpha = centering_coefficients("full", q_logp)
    assert alpha is None
    torch.testing.assert_close(grad_of_expected(coef, z),
                               torch.tensor([-0.1, 0.1], dtype=torch.float64), rtol=0, atol=1e-15)


logits = st.lists(st.floats(-4, 4), min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(logits, st.floats(-3, 3))
def test_on_policy_the_exact_term_has_zero_gradient(zs, adv):
    z = torch.tensor(zs, dtype=torch.float64)
    q_logp = torch.log_softmax(z, -1)
    coef, _ = centering_coefficients("full", q_logp)
    z1 = z.clone().requires_grad_(True)
    lp = torch.log_softmax(z1, -1)
    centered_term(lp[None, None], coef[None, None], torch.tensor([[adv]], dtype=torch.float64),
                  torch.ones(1, 1, dtype=torch.float64)).sum().backward()
    assert float(z1.grad.abs().max()) < 1e-12


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 10).flatmap(lambda v: st.tuples(
    st.lists(st.floats(-4, 4), min_size=v, max_size=v),
    st.lists(st.floats(-4, 4), min_size=v, max_size=v))))
def test_the_centered_score_has_zero_mean_under_the_sampler(pair):
    """E_{a ~ q}[grad log pi_a - sum_v q_v grad log pi_v] = 0 for any pi and q."""
    z, zq = (torch.tensor(x, dtype=torch.float64) for x in pair)
    q = torch.softmax(zq, -1)
    coef, _ = centering_coefficients("full", torch.log(q))
    mean = sum(q[a] * grad_of_expected(torch.nn.functional.one_hot(torch.tensor(a), len(z))
                                       .double(), z) for a in range(len(z)))
    torch.testing.assert_close(mean - grad_of_expected(coef, z), torch.zeros_like(z),
                               rtol=0, atol=1e-13)


def head_and_tails(q: torch.Tensor, p: torch.Tensor, head: torch.Tensor):
    """q and pi's log-probs on the head `head` (token ids) and both tails' log-masses
    (float64). The formula holds for any head; an engine's is the sampler's top k."""
    lq, lp = torch.log(q), torch.log(p)
    tail = torch.ones_like(q, dtype=torch.bool)
    tail[head] = False
    none = torch.tensor(-torch.inf, dtype=torch.float64)
    q_tail = lq[tail].logsumexp(0) if tail.any() else none
    p_tail = lp[tail].logsumexp(0) if tail.any() else none
    return lq[head], lp[head], q_tail, p_tail, head


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-3, 3), min_size=4, max_size=10), st.integers(1, 3),
       st.floats(0.05, 0.9))
def test_the_proportional_tail_is_exact_when_the_tail_is_proportional(zs, k, share):
    """q = q_H on the head and alpha * pi on the tail: the head-only residual's gradient
    equals the full expectation's; with nothing outside the head it is q itself."""
    z = torch.tensor(zs, dtype=torch.float64)
    p = torch.softmax(z, -1)
    head = p.argsort(descending=True)[:k]
    q = p.clone()
    tail = torch.ones_like(p, dtype=torch.bool)
    tail[head] = False
    q[tail] = p[tail] / p[tail].sum() * share  # the tail's mass `share`, shaped like pi
    q[head] = torch.softmax(torch.arange(k, 0, -1, dtype=torch.float64), -1) * (1 - share)
    q_logp, p_logp, q_tail, p_tail, ids = head_and_tails(q, p, head)
    coef, alpha = centering_coefficients("topk", q_logp, p_logp, q_tail, p_tail)
    on_head = torch.zeros_like(z).index_put((ids,), coef)
    full, _ = centering_coefficients("full", torch.log(q))
    torch.testing.assert_close(grad_of_expected(on_head, z), grad_of_expected(full, z),
                               rtol=0, atol=1e-13)
    q_logp, p_logp, q_tail, p_tail, ids = head_and_tails(q, p, torch.arange(len(z)))
    for mode in ("topk", "topk_renorm"):
        coef, _ = centering_coefficients(mode, q_logp, p_logp, q_tail, p_tail)
        torch.testing.assert_close(torch.zeros_like(z).index_put((ids,), coef), q,
                                   rtol=0, atol=1e-15)


def test_an_unknown_mode_lists_the_valid_ones():
    with pytest.raises(ValueError, match="full, topk, topk_renorm"):
        centering_coefficients("fullest", torch.zeros(3))


@pytest.fixture
def fp4_batch(tiny_policy_dir):
    policy, tok = load_policy(tiny_policy_dir)
    sampler = RolloutModel(policy, "fp4_e2m1")()
    r = rollout_gap(policy, tok, sampler, True)
    ids, mask = r.full_sequences()
    return policy, sampler, ids, mask, r.response_ids, r.response_mask


def test_the_sampler_head_is_its_teacher_forced_softmax(fp4_batch):
    policy, sampler, ids, mask, resp, m = fp4_batch
    t = resp.shape[1]
    with torch.no_grad():
        want = torch.log_softmax(sampler(input_ids=ids, attention_mask=mask,
                                         position_ids=position_ids(mask)).logits[
            :, -t - 1:-1].double(), -1)
    top_ids, top_logp, tail = behaviour_head(sampler, ids, mask, resp, k=3)
    valid = m.bool()
    torch.testing.assert_close(top_logp.double()[valid], want.topk(3, -1).values[valid],
                               rtol=1e-4, atol=1e-5)
    head_mass = want.gather(-1, top_ids).exp().sum(-1)
    torch.testing.assert_close(tail.double().exp()[valid], (1 - head_mass)[valid],
                               rtol=1e-4, atol=1e-6)
    none, every, no_tail = behaviour_head(sampler, ids, mask, resp)
    assert none is None and float(no_tail[valid].max()) == -torch.inf
    torch.testing.assert_close(every.double()[valid], want[valid], rtol=1e-4, atol=1e-5)


def test_the_update_reads_pi_at_the_head_with_gradient(fp4_batch):
    policy, sampler, ids, mask, resp, m = fp4_batch
    top_ids, _, _ = behaviour_head(sampler, ids, mask, resp, k=4)
    logp, _, (head, tail) = forward_logprobs(policy, ids, mask, resp, head=top_ids)
    t = resp.shape[1]
    full = torch.log_softmax(policy(input_ids=ids, attention_mask=mask,
                                    position_ids=position_ids(mask)).logits[:, -t - 1:-1]
                             .float(), -1)
    valid = m.bool()
    torch.testing.assert_close(head[valid], full.gather(-1, top_ids)[valid], rtol=1e-5,
                               atol=1e-5)
    assert head.requires_grad and not tail.requires_grad
    _, _, (every, _) = forward_logprobs(policy, ids, mask, resp, head=ALL)
    torch.testing.assert_close(every[valid], full[valid], rtol=1e-5, atol=1e-5)


def test_the_top_k_bias_against_the_exact_version_shrinks_with_k(fp4_batch):
    """On the testbed's model under NVFP4 sampling: the relative distance of the top-k
    gradients to the exact one falls as k grows (the proportional tail's closer than the
    renormalised head's), and is 0 at k = V."""
    policy, sampler, ids, mask, resp, m = fp4_batch
    exact = centering_gradient(policy, ids, mask, resp, m, behaviour_head(sampler, ids, mask, resp),
                           "full")
    vocab = policy.config.vocab_size
    bias = {}
    for mode in ("topk", "topk_renorm"):
        for k in (1, 4, 16, vocab):
            got = centering_gradient(policy, ids, mask, resp, m,
                                 behaviour_head(sampler, ids, mask, resp, k=k), mode)
            bias[mode, k] = float((got - exact).norm() / exact.norm())
    for mode in ("topk", "topk_renorm"):
        assert bias[mode, 1] > bias[mode, 4] > bias[mode, 16] and bias[mode, vocab] < 1e-5
    assert bias["topk", 4] < bias["topk_renorm", 4]


# ---------------------------------------------------------------- in a run
def first_row(policy_dir, path, *extra):
    """One step on a reward that varies within every group (a response's length), so that
    the advantages are not all 0."""
    from lmpo.trainer.checkpoint import read_rows
    from lmpo.trainer.loop import train
    from tests.test_rewards import write_fn
    from tests.test_robustness import tiny

    spec = write_fn(path.parent, """
def reward(prompts, completions, answers, **meta):
    return [len(c) / 10 for c in completions]
""")
    train(tiny(policy_dir, "steps=1", f"reward.fn={spec}", "rollout.group_size=4", *extra,
               preset="reinforce"), path, progress=False)
    return read_rows(path / "metrics.jsonl")[0]


def test_on_policy_the_step_is_unchanged_and_off_policy_it_is_not(tiny_policy_dir, tmp_path):
    """With a float32 sampler and one on-policy update the exact term's gradient is 0: the
    step's gradient norm is the uncentered one's. Under NVFP4 sampling the top-k term
    moves it, and the head's mass and alpha are logged."""
    plain = first_row(tiny_policy_dir, tmp_path / "plain")
    full = first_row(tiny_policy_dir, tmp_path / "full", "loss.centered_score=full")
    assert plain["grad/norm"] > 0
    assert full["grad/norm"] == pytest.approx(plain["grad/norm"], rel=1e-5)
    assert full["loss/centered_score/head_mass"] == pytest.approx(1.0, abs=1e-5)
    fp4 = ("rollout.dtype=fp4_e2m1",)
    low = first_row(tiny_policy_dir, tmp_path / "low", *fp4)
    top = first_row(tiny_policy_dir, tmp_path / "top", *fp4, "loss.centered_score=topk",
                    "loss.centered_score_k=4")
    assert top["reward/mean"] == low["reward/mean"]  # the same rollout
    # the tiny model's NVFP4 mismatch is small, and so is the drift it removes (2.5e-4 of
    # the gradient's norm here): ten times the on-policy tolerance
    assert abs(top["grad/norm"] - low["grad/norm"]) > 1e-4 * low["grad/norm"]
    assert 0 < top["loss/centered_score/head_mass"] < 1
    assert top["loss/centered_score/alpha_mean"] > 0


@pytest.mark.parametrize("extra, words", [
    (("loss.name=ppo",), "score-function loss (-A log pi: gpg, reinforce); 'ppo'"),
    (("rollout.correction.kind=tis",), "rollout.correction tis weighs or masks single"),
    (("rollout.correction.kind=mis", "rollout.correction.hparams.level=token"),
     "rollout.correction mis weighs"),
    (("loss.seq_divergence_threshold=0.1",), "loss.seq_divergence_directional drops single"),
])
def test_what_it_cannot_compose_with_is_refused(tiny_policy_dir, extra, words):
    from tests.test_robustness import tiny

    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        tiny(tiny_policy_dir, "loss.centered_score=full", *extra, preset="reinforce")
    tiny(tiny_policy_dir, "loss.centered_score=full", "rollout.correction.kind=seq_tis",
         preset="reinforce")  # a response's weight composes


def test_the_preset_loads_and_the_engines_refuse_it_by_name(tiny_policy_dir):
    from lmpo.experiments.engines.trl_mapping import trl_refusals
    from lmpo.experiments.engines.verl_launch import refusals
    from tests.test_robustness import tiny

    cfg = tiny(tiny_policy_dir, preset="score_centering")
    assert (cfg.loss.name, cfg.loss.centered_score, cfg.loss.centered_score_k) == \
        ("reinforce", "topk", 32)
    assert any(x.startswith("loss.centered_score=topk: TRL has no score centering") for x in
               trl_refusals(cfg))
    assert any(x.startswith("loss.centered_score=topk: verl 0.9.1 has no score centering")
               for x in refusals(cfg))
