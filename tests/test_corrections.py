"""Rollout corrections against float64 references written from each source's definition
(tests/correction_references/: every registered correction has one), token by token with
`math`; verl itself is compared in tests/test_verl.py. Applied in the update as verl
applies its weights and its rejection mask."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.rollout import get_correction, list_corrections
from tests.correction_references import REFERENCES


def batch(seed: int, b: int = 7, t: int = 9, spread: float = 0.4):
    g = torch.Generator().manual_seed(seed)
    lr = spread * torch.randn(b, t, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, t, generator=g) < 0.8).double()
    mask[0] = 0.0  # an empty response
    lr[1, 0] = 30.0  # beyond the safety bound
    return lr, mask


CASES = [(kind, case) for kind, ref in sorted(REFERENCES.items()) for case in ref.cases]
DRAWS = [(0, 0.4), (1, 0.4), (2, 0.3), (3, 0.1)]  # (seed, spread of the log-ratios)


def test_every_correction_has_a_float64_reference():
    missing = set(list_corrections()) - set(REFERENCES)
    assert not missing, f"no reference for {sorted(missing)}: add tests/correction_references/"
    assert not set(REFERENCES) - set(list_corrections()), "a reference for no correction"


@pytest.mark.parametrize("kind,hp", CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("draw", DRAWS, ids=lambda d: f"seed{d[0]}")
def test_every_correction_matches_its_float64_reference(kind, hp, draw):
    """Weights (0 on padding) and mask against the reference, on log-ratios of several
    spreads (one token past the safety bound, one empty response); a weighting
    correction's metrics from the reference's weights."""
    from lmpo.rollout import correction_hparams

    lr, mask = batch(draw[0], spread=draw[1])
    got = get_correction(kind, **hp)(lr, mask)
    weights, want_mask = REFERENCES[kind].fn(lr.tolist(), mask.tolist(),
                                             **(correction_hparams(kind) | hp))
    assert torch.equal(got.mask, torch.tensor(want_mask, dtype=torch.float64))
    if weights is None:
        assert got.weights is None
        return
    want = torch.tensor(weights, dtype=torch.float64)
    torch.testing.assert_close(got.weights, want, rtol=1e-12, atol=1e-300)
    valid = mask > 0
    removed = valid & (want == 0)
    assert got.metrics["rollout_corr/masked_frac"] == pytest.approx(
        float(removed.sum()) / float(valid.sum()), abs=1e-15)
    assert got.metrics["rollout_corr/weight_max"] == pytest.approx(float(want[valid].max()))
    assert got.metrics["rollout_corr/weight_min"] == pytest.approx(float(want[valid].min()))


def trl_truncate(lr, mask, lower, upper, level):
    """TRL's `*_truncate` written out from GRPOTrainer: exp of the masked difference (per
    token, or its sum per sequence), clamped to [clip_min, clip_max]; no safety bound."""
    out = []
    for row, m in zip(lr, mask, strict=True):
        diffs = [x * k for x, k in zip(row, m, strict=True)]
        r = [math.exp(sum(diffs))] * len(row) if level == "sequence" else \
            [math.exp(d) for d in diffs]
        out.append([min(max(v, lower), upper) for v in r])
    return out


@pytest.mark.parametrize("kind,level", [("tis", "token"), ("seq_tis", "sequence")])
@pytest.mark.parametrize("seed", [0, 2])
def test_two_sided_truncation_is_trls_truncate_mode(kind, level, seed):
    """TRL 1.16 computes it inline in `_generate_and_score_completions` (no function to
    call): against that code written out, on the valid tokens (lmpo's weight is 0 on
    padding, TRL's loss mask removes them)."""
    lr, mask = batch(seed, spread=0.3)
    lr[1, 0] = 3.0  # inside the safety bound, where the two agree exactly
    got = get_correction(kind, lower=0.7, upper=1.4)(lr, mask)
    want = torch.tensor(trl_truncate(lr.tolist(), mask.tolist(), 0.7, 1.4, level),
                        dtype=torch.float64)
    torch.testing.assert_close(got.weights, want * mask, rtol=1e-12, atol=1e-300)
    assert float(((got.weights == 0.7) & (mask > 0)).sum()) > 0  # the lower end binds


def test_outlier_token_mask_by_hand():
    """SkyRL's own test case: ratios [1, 1, e^5 = 148.4] with bounds [1e-4, 100]: the
    response is masked; and with no bound at all the trainer refuses it when it builds."""
    from lmpo.rollout.corrections.chain import build_correction

    lr, mask = torch.tensor([[0.0, 0.0, 5.0]], dtype=torch.float64), torch.ones(1, 3).double()
    assert torch.equal(get_correction("outlier_token_is")(lr, mask).mask, 0 * mask)
    assert torch.equal(get_correction("outlier_token_is", upper=200.0)(lr, mask).mask, mask)
    with pytest.raises(ValueError, match="needs lower or upper"):
        build_correction([("outlier_token_is", {"lower": None, "upper": None})])


@pytest.mark.parametrize("threshold", [0.04, 0.01, 1e-6])
def test_m2po_keeps_tokens_whose_mean_square_is_below_the_threshold(threshold):
    lr, mask = batch(2)
    kept = get_correction("m2po", threshold=threshold)(lr, mask).mask.bool()
    assert kept.sum() >= 1
    if kept.sum() > 1:
        assert float(lr[kept].square().mean()) < threshold


def test_m2po_by_hand():
    lr = torch.tensor([[0.5, 0.1, 0.0], [0.3, 0.0, 0.2]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=torch.float64)
    # m2: 0.25, 0.01, 0, 0.09, 0 -> drop 0.25 (rest mean 0.025 >= 0.02), drop 0.09 (0.0033)
    got = get_correction("m2po", threshold=0.02)(lr, mask)
    assert got.mask.tolist() == [[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]]
    assert got.metrics["rollout_corr/masked_frac"] == pytest.approx(2 / 5)


@pytest.mark.parametrize("kind", list_corrections())
def test_nothing_changes_when_rollout_and_update_agree(kind):
    _, mask = batch(0)
    got = get_correction(kind)(torch.zeros_like(mask), mask)
    if got.weights is not None:
        assert torch.equal(got.weights, mask)  # every weight 1
    assert torch.equal(got.mask, mask)
    assert got.metrics["rollout_corr/masked_frac"] == 0.0
    assert got.metrics["rollout_corr/seq_masked_frac"] == 0.0


def test_batch_normalisation_gives_mean_weight_one():
    lr, mask = batch(4)
    for kind in ("tis", "icepop"):
        w = get_correction(kind, batch_normalize=True)(lr, mask).weights
        assert float((w * mask).sum() / mask.sum()) == pytest.approx(1.0, abs=1e-7)
    w = get_correction("seq_tis", batch_normalize=True)(lr, mask).weights
    rows = mask.sum(-1) > 0
    per_seq = (w * mask).sum(-1)[rows] / mask.sum(-1)[rows]
    assert float(per_seq.mean()) == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("kind,hp,says", [
    ("icepop", {"lower": 2.0, "upper": 1.5}, "lower=2.0 needs lower <= upper (1.5)"),
    ("rs_token_k1", {"lower": 3.0}, "lower=3.0 needs lower <= upper (2.0)"),
    ("tis", {"upper": 0}, "upper=0 is outside its domain (0, inf)"),
    ("mis", {"level": "batch"}, "level='batch' is outside its domain {token, sequence}"),
    ("rs_seq_sum_k3", {"lower": 0.5}, "unknown hyper-parameter(s) ['lower']"),
])
def test_bad_thresholds_fail_with_the_key(kind, hp, says):
    """When the correction is built (a band's ends in order included), not at its first
    call."""
    with pytest.raises((ValueError, TypeError, KeyError)) as info:
        get_correction(kind, **hp)
    assert says in str(info.value)


# ---------------------------------------------------------------- in the update
def one_update(policy_dir, weights=None, update_mask=None, nll_coef=0.0, correct=None):
    """The policy gradient of one minibatch with the given correction fields (float64)."""
    from lmpo.config import load_config
    from lmpo.losses import get_loss
    from lmpo.models import load_policy
    from lmpo.trainer.batch import TrainBatch
    from lmpo.trainer.objective import build_objective
    from lmpo.trainer.train_config import TrainConfig
    from lmpo.trainer.update import accumulate_gradients

    cfg = load_config(TrainConfig, "grpo", [f"policy={policy_dir}", "rollout.max_new_tokens=5",
                                            f"loss.nll_coef={nll_coef}",
                                            "optim.micro_batch_size=2"])
    policy, tok = load_policy(policy_dir)
    policy.double()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (4, 9), generator=g)
    mask = torch.ones_like(ids)
    resp_mask = torch.ones(4, 5, dtype=torch.float64)
    resp_mask[3, 3:] = 0
    resp_ids = ids[:, 4:]
    old = -torch.rand(4, 5, generator=g, dtype=torch.float64) - 3.0
    adv = torch.randn(4, 1, generator=g, dtype=torch.float64).expand(4, 5)
    weights, update_mask, correct = (None if x is None else x.double()
                                     for x in (weights, update_mask, correct))
    b = TrainBatch(ids, mask, resp_ids, resp_mask, old, adv, keep=torch.arange(4),
                   is_weights=weights, update_mask=update_mask, correct=correct)
    policy.zero_grad()
    objective = build_objective(cfg, get_loss("ppo_clip"), "token-mean")
    metrics, bad = accumulate_gradients(policy, objective, b, torch.arange(4), cfg)
    assert bad is None
    return torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None]), \
        metrics


def close(a, b):
    """Equal to float32 rounding (the log-softmax runs in float32 even for a float64
    model): relative to the gradient's norm."""
    assert float((a - b).norm()) <= 1e-6 * float(b.norm()), float((a - b).norm() / b.norm())


def test_weights_scale_each_tokens_loss_and_rejection_leaves_the_counts(tiny_policy_dir):
    plain, _ = one_update(tiny_policy_dir)
    doubled, _ = one_update(tiny_policy_dir, weights=torch.full((4, 5), 2.0))
    close(doubled, 2 * plain)
    keep = torch.ones(4, 5)
    keep[3, 3:] = 0
    keep[:2] = 0  # reject two responses: the token-mean is over the rest
    rejected, _ = one_update(tiny_policy_dir, update_mask=keep)
    half = torch.ones(4, 5)
    half[3, 3:] = 0
    half[:2] = 0
    only, _ = one_update(tiny_policy_dir, weights=half)  # same tokens, all counted
    n_all, n_kept = 4 * 5 - 2, 2 * 5 - 2
    close(rejected, only * n_all / n_kept)


def test_nll_on_correct_responses_adds_its_own_token_mean(tiny_policy_dir):
    from lmpo.models import load_policy
    from lmpo.models.forward import forward_logprobs

    correct = torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    base, _ = one_update(tiny_policy_dir)
    with_nll, metrics = one_update(tiny_policy_dir, nll_coef=0.1, correct=correct)
    policy, _ = load_policy(tiny_policy_dir)
    policy.double()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (4, 9), generator=g)
    resp_mask = torch.ones(4, 5, dtype=torch.float64)
    resp_mask[3, 3:] = 0
    logp, _ = forward_logprobs(policy, ids, torch.ones_like(ids), ids[:, 4:])
    m = resp_mask * correct[:, None]
    nll = -(logp * m).sum() / m.sum()
    (0.1 * nll).backward()
    want = torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])
    close(with_nll - base, want)
    assert metrics["loss/term_nll"] == pytest.approx(0.1 * float(nll.detach()), rel=1e-6)
