"""The opt-in input check for library users (`get_loss(name, validate=True)`,
`lmpo.losses.check_inputs`): one clear error for a non-finite log-prob or advantage on a
valid token, a mask outside {0, 1}, non-float tensors; valid inputs give exactly the
unchecked loss, and padded positions may hold anything."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.advantages import advantage_meta, get_advantage, list_advantages
from lmpo.losses import check_inputs, get_loss, list_losses


def inputs():
    g = torch.Generator().manual_seed(0)
    logp = torch.log(torch.rand(3, 4, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    old = logp + 0.1 * torch.randn(3, 4, generator=g, dtype=torch.float64)
    adv = torch.randn(3, generator=g, dtype=torch.float64)
    mask = torch.ones(3, 4, dtype=torch.float64)
    mask[2, 2:] = 0
    return logp, old, adv, mask


@pytest.mark.parametrize("name", sorted(list_losses()))
def test_valid_inputs_give_exactly_the_unchecked_loss(name):
    logp, old, adv, mask = inputs()
    old[2, 3] = -math.inf  # a padded position may hold anything
    want, _ = get_loss(name)(logp, old, adv, mask)
    got, _ = get_loss(name, validate=True)(logp, old, adv, mask)
    assert torch.equal(want, got)


@pytest.mark.parametrize("edit,says", [
    (lambda x: x[1].__setitem__((0, 1), -math.inf), r"old_logp is not finite on a valid token: "
                                                    r"-inf at index \(0, 1\)"),
    (lambda x: x[0].__setitem__((1, 0), math.nan), r"logp is not finite .* index \(1, 0\)"),
    (lambda x: x[2].__setitem__(2, math.nan), r"adv is not finite .* index \(2, 0\) \(index "
                                              r"\[b\] of adv \[B\]\)"),
    (lambda x: x[3].__setitem__((0, 0), 0.5), r"mask must hold 0 and 1 only, got 0.5 at "
                                              r"index \(0, 0\)"),
])
def test_a_bad_value_is_one_clear_error(edit, says):
    x = list(inputs())
    edit(x)
    with pytest.raises(ValueError, match=says):
        get_loss("output_reset", validate=True)(*x)
    with pytest.raises(ValueError, match=says):
        check_inputs(*x)


def test_wrong_types_and_shapes_are_refused():
    logp, old, adv, mask = inputs()
    with pytest.raises(ValueError, match="adv must be a floating-point tensor"):
        check_inputs(logp, old, adv.long(), mask)
    with pytest.raises(ValueError, match=r"old_logp shape \(3, 3\) does not match"):
        check_inputs(logp, old[:, :3], adv, mask)
    with pytest.raises(TypeError, match="mask must be a torch.Tensor"):
        check_inputs(logp, old, adv, [[1.0]])


# ---------------------------------------------------------------- get_advantage(validate=True)
def group_inputs():
    scores = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.5, 0.5], dtype=torch.float64)
    return scores, torch.tensor([0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize("name", sorted(n for n in list_advantages()
                                        if not advantage_meta(n)["needs_critic"]
                                        and not advantage_meta(n)["wants_parts"]
                                        and not advantage_meta(n)["wants_baselines"]
                                        and not advantage_meta(n)["wants_lengths"]
                                        and not advantage_meta(n)["wants_paths"]))
def test_a_checked_group_estimator_gives_exactly_the_unchecked_advantages(name):
    scores, groups = group_inputs()
    want, _ = get_advantage(name)(scores, groups)
    got, _ = get_advantage(name, validate=True)(scores, groups)
    assert torch.equal(want, got)


def test_a_bad_group_input_is_one_clear_error():
    scores, groups = group_inputs()
    with pytest.raises(ValueError, match="scores must be a floating-point tensor"):
        get_advantage("grpo", validate=True)(scores.long(), groups)
    with pytest.raises(ValueError, match=r"non-finite scores at indices 1 \(nan\)"):
        get_advantage("grpo", validate=True)(torch.tensor([0.0, math.nan]), groups[:2])
    est = get_advantage("grpo", validate=True)
    assert est.state_dict() == get_advantage("grpo").state_dict()  # the estimator's own


def test_a_bad_critic_input_is_one_clear_error():
    rewards = torch.zeros(2, 3, dtype=torch.float64)
    values = torch.ones(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=torch.float64)
    est = get_advantage("gae", validate=True)
    want = get_advantage("gae")(rewards, values, mask)[0]
    values[0, 2] = math.inf  # padding may hold anything
    assert torch.equal(est(rewards, values, mask)[0], want)
    values[1, 0] = math.nan
    with pytest.raises(ValueError, match=r"values is not finite on a valid token: nan at "
                                         r"index \(1, 0\)"):
        est(rewards, values, mask)
    with pytest.raises(ValueError, match=r"mask must hold 0 and 1 only, got 2.0"):
        est(rewards, torch.ones(2, 3, dtype=torch.float64), mask * 2)
    with pytest.raises(ValueError, match=r"bootstrap is not finite: inf at index \(0,\)"):
        est(rewards, torch.ones(2, 3, dtype=torch.float64), mask,
            bootstrap=torch.tensor([math.inf, 0.0], dtype=torch.float64))
