"""grpo / dr_grpo / rloo against hand-computed values, and every group estimator's
properties (NaN-free on any layout, constant scores give 0, input errors name the
indices); the plain-loop references: tests/test_advantage_references.py."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from lmpo.advantages import (
    advantage_meta,
    get_advantage,
    group_estimators,
    list_advantages,
    nonzero_variance_groups,
)

D = torch.float64
# a group of one keeps its score under these (verl's and SkyRL's baseline 0 for it)


def test_grpo_hand_computed():
    scores = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.5], dtype=D)
    gid = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    adv, m = get_advantage("grpo", eps=0.0)(scores, gid)
    s = math.sqrt(1 / 3)  # std([1,0,0,1], ddof=1)
    want = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0, 0.0]
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)
    assert m["adv/zero_std_frac"] == pytest.approx(2 / 3)  # group 1 (all 1s) and group 2 (one)


def test_grpo_batch_scale_and_dr_grpo_hand_computed():
    scores = torch.tensor([1.0, 0.0, 3.0, 3.0], dtype=D)
    gid = torch.tensor([7, 7, 2, 2])
    sb = statistics.stdev([1.0, 0.0, 3.0, 3.0])
    adv, _ = get_advantage("grpo", scale="batch", eps=0.0)(scores, gid)
    torch.testing.assert_close(adv, torch.tensor([0.5 / sb, -0.5 / sb, 0, 0], dtype=D))
    adv, _ = get_advantage("dr_grpo")(scores, gid)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0], dtype=D))
    adv, _ = get_advantage("grpo", scale="none")(scores, gid)
    torch.testing.assert_close(adv, torch.tensor([0.5, -0.5, 0.0, 0.0], dtype=D))


def test_rloo_hand_computed():
    scores = torch.tensor([1.0, 0.0, 0.0, 2.0, 5.0], dtype=D)
    gid = torch.tensor([0, 0, 0, 0, 1])
    adv, _ = get_advantage("rloo")(scores, gid)
    want = [1 - 2 / 3, 0 - 3 / 3, 0 - 3 / 3, 2 - 1 / 3, 0.0]  # group of one -> 0
    torch.testing.assert_close(adv, torch.tensor(want, dtype=D), rtol=1e-12, atol=1e-12)


def test_float32_scores_keep_their_dtype():
    adv, _ = get_advantage("grpo")(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    assert adv.dtype == torch.float32


@st.composite
def layouts(draw):
    sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    gid = [i for i, n in enumerate(sizes) for _ in range(n)]
    perm = draw(st.permutations(range(len(gid))))
    gid = [gid[i] for i in perm]
    const = draw(st.booleans())
    vals = draw(st.lists(st.floats(-5, 5), min_size=len(gid), max_size=len(gid)))
    scores = [1.0] * len(gid) if const else vals
    return torch.tensor(scores, dtype=D), torch.tensor(gid)


def test_group_estimators_are_every_critic_free_entry_of_one_score_per_sample():
    """Every estimator takes (scores [B], group ids [B]) and gives [B] advantages, unless
    its metadata says it reads a critic's values (`needs_critic`) or the policy's path
    statistics (`wants_paths`); those refuse the group call rather than guess."""
    scores, gid = torch.tensor([1.0, 0.0, 1.0, 0.0], dtype=D), torch.tensor([0, 0, 1, 1])
    for name in list_advantages():
        meta = advantage_meta(name)
        extra = {"lengths": torch.full((4,), 3.0, dtype=D)} if meta["wants_lengths"] else {}
        if meta["wants_baselines"]:
            extra["baselines"] = torch.zeros(4, dtype=D)
        if meta["needs_critic"] or meta["wants_paths"]:
            assert name not in group_estimators()
            with pytest.raises((TypeError, ValueError)):
                get_advantage(name)(scores, gid, **extra)
        else:
            assert name in group_estimators()
            assert get_advantage(name)(scores, gid, **extra)[0].shape == scores.shape


@given(data=layouts(), name=st.sampled_from(sorted(group_estimators())))
@example(data=(torch.ones(7, dtype=D), torch.tensor([0, 1, 1, 2, 2, 2, 2])),
         name="reinforce_plus_plus_baseline")  # a group of one among constant scores
def test_random_layouts_and_constant_scores_are_nan_free(data, name):
    scores, gid = data
    sizes = torch.unique(gid, return_counts=True)[1]
    extra = {"lengths": (torch.arange(len(scores)) % 5 + 1).to(D)} \
        if advantage_meta(name)["wants_lengths"] else {}
    if advantage_meta(name)["wants_baselines"]:  # another sample's score: constant if they are
        extra["baselines"] = torch.roll(scores, 1)
    if bool((sizes < advantage_meta(name)["min_group"]).any()):
        with pytest.raises(ValueError, match="at least 2 responses per group"):
            get_advantage(name)(scores, gid)
        return
    adv, metrics = get_advantage(name)(scores, gid, **extra)
    assert adv.shape == scores.shape and torch.isfinite(adv).all()
    assert all(math.isfinite(v) for v in metrics.values())
    if bool((scores == scores[0]).all()) and \
            advantage_meta(name)["constant_groups"] not in ("prior", "none"):
        singleton = (sizes == 1)[torch.unique(gid, return_inverse=True)[1]]
        if advantage_meta(name)["singleton"] == "score":
            adv = adv[~singleton]
        meta = advantage_meta(name)
        if meta["whitens"] and meta["constant_groups"] == "zero" and bool(singleton.any()):
            # a group of one keeps its score, and the batch whitening that follows shifts
            # every other (zero) advantage by the same amount: equal, not zero
            assert torch.allclose(adv, adv[0].expand_as(adv), rtol=0, atol=1e-12)
            return
        # REINFORCE++ whitens over tokens with verl's 1e-8 in the means: ~1e-8 / var^0.5
        assert (adv.abs() <= (1e-3 if meta["whitens"] else 0)).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("name", sorted(group_estimators()))
def test_non_finite_scores_name_the_indices(bad, name):
    scores = torch.tensor([0.0, 1.0, bad, 1.0, bad])
    with pytest.raises(ValueError, match=r"indices 2 \(.*\), 4 \("):
        get_advantage(name)(scores, torch.tensor([0, 0, 1, 1, 1]))


def test_shape_and_name_errors():
    with pytest.raises(ValueError, match=r"group_ids shape \(3,\) must equal scores shape \(2,\)"):
        get_advantage("grpo")(torch.zeros(2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="1-D"):
        get_advantage("grpo")(torch.zeros(2, 2), torch.zeros(2, dtype=torch.long))
    with pytest.raises(KeyError, match="did you mean 'grpo'.*valid advantage estimators"):
        get_advantage("gpro")
    with pytest.raises(TypeError, match="valid ones: scale, eps"):
        get_advantage("grpo", std=True)
    with pytest.raises(ValueError, match="scale"):
        get_advantage("grpo", scale="global")


def test_stateless_estimators_round_trip_empty_state():
    est = get_advantage("rloo")
    assert est.state_dict() == {}
    est.load_state_dict({})
    with pytest.raises(ValueError, match="stateless"):
        est.load_state_dict({"x": 1})


def test_dynamic_sampling_keeps_varied_groups_and_counts_the_rest():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.3])
    gid = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    keep, dropped = nonzero_variance_groups(scores, gid)
    assert keep.tolist() == [2, 3]
    assert dropped == 3


def singleton_layouts(name):
    """The explicit edge cases: a group of one (score 1, then 0) beside a mixed group and
    an all-equal group."""
    for s0 in (1.0, 0.0):
        scores = torch.tensor([s0, 0.0, 1.0, 1.0, 1.0], dtype=D)
        gid = torch.tensor([0, 1, 1, 2, 2])
        extra = {"lengths": torch.tensor([3.0, 4.0, 5.0, 2.0, 6.0], dtype=D)} \
            if advantage_meta(name)["wants_lengths"] else {}
        if advantage_meta(name)["wants_baselines"]:
            extra["baselines"] = torch.roll(scores, 1)
        yield scores, gid, extra


@pytest.mark.parametrize("name", sorted(group_estimators()))
def test_a_singleton_group_follows_the_estimators_declared_convention(name):
    """`singleton: zero`: a group of one gets A = 0, so its score changes nothing in the
    batch; `score`: its advantage moves with its score. `min_group` > 1: refused. An
    estimator that keeps a singleton's score while declaring zero fails here, whatever the
    random layouts above happened to draw."""
    meta = advantage_meta(name)
    runs = list(singleton_layouts(name))
    if meta["min_group"] > 1:
        with pytest.raises(ValueError, match=f"at least {meta['min_group']} responses"):
            get_advantage(name)(runs[0][0], runs[0][1], **runs[0][2])
        return
    (a1, _), (a0, _) = (get_advantage(name)(s, g, **e) for s, g, e in runs)
    if meta["singleton"] == "zero":
        assert a1[0] == 0 and a0[0] == 0 and torch.equal(a1, a0)
    else:
        assert meta["singleton"] == "score" and a1[0] != a0[0]


@pytest.mark.parametrize("name", sorted(group_estimators()))
def test_all_equal_groups_follow_the_declared_convention(name):
    """Every group all-equal (no singleton), the second batch an estimator sees (a prior
    has moments by then): `constant_groups: zero` gives A = 0 (within the whitening's 1e-8
    for REINFORCE++ with a baseline), "batch" and "prior" do not (no group baseline;
    shrinkage toward the prior)."""
    scores = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0], dtype=D)
    gid = torch.tensor([0, 0, 1, 1, 2, 2])
    extra = {"lengths": torch.arange(1.0, 7.0, dtype=D)} \
        if advantage_meta(name)["wants_lengths"] else {}
    if advantage_meta(name)["wants_baselines"]:
        extra["baselines"] = scores.clone()
    est = get_advantage(name)
    est(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0], dtype=D), gid, **extra)
    adv, _ = est(scores, gid, **extra)
    if advantage_meta(name)["constant_groups"] == "zero":
        tol = 1e-3 if advantage_meta(name)["whitens"] else 0.0
        assert (adv.abs() <= tol).all(), adv
    else:
        assert (adv.abs() > 1e-3).any(), adv
