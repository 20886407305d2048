"""TRL's reference sync (`kl.ref_sync_every`, `kl.ref_sync_alpha`): the mix by hand in
float64, only on every N-th step, its state round trip, and the refusals. Its resume
exactness is in tests/test_resume.py (SCHEDULED)."""

from __future__ import annotations

import pytest
import torch

from lmpo.trainer.ref_sync import ReferenceSync


def test_the_reference_moves_toward_the_policy_every_nth_step():
    torch.manual_seed(0)
    policy, reference = torch.nn.Linear(3, 2).double(), torch.nn.Linear(3, 2).double()
    r0 = [p.detach().clone() for p in reference.parameters()]
    pi = [p.detach().clone() for p in policy.parameters()]
    sync = ReferenceSync(reference, policy, every=3, alpha=0.6)
    assert sync.step_end(1) == {"kl/ref_syncs": 0.0} and sync.step_end(2)["kl/ref_syncs"] == 0
    assert all(torch.equal(a, b) for a, b in zip(reference.parameters(), r0, strict=True))
    assert sync.step_end(3) == {"kl/ref_syncs": 1.0}
    for got, r, p in zip(reference.parameters(), r0, pi, strict=True):
        torch.testing.assert_close(got, 0.4 * r + 0.6 * p, rtol=1e-15, atol=0)
    saved = sync.state_dict()
    other = ReferenceSync(torch.nn.Linear(3, 2).double(), policy, every=3, alpha=0.6)
    other.load_state_dict(saved)
    assert other.syncs == 1 and all(torch.equal(a, b) for a, b in zip(
        other.reference.parameters(), reference.parameters(), strict=True))
    full = ReferenceSync(torch.nn.Linear(3, 2).double(), policy, every=1, alpha=1.0)
    full.step_end(1)  # alpha 1: the reference becomes the policy
    assert all(torch.equal(a, b) for a, b in zip(full.reference.parameters(),
                                                 policy.parameters(), strict=True))
    with pytest.raises(ValueError, match="0 < alpha <= 1"):
        ReferenceSync(reference, policy, every=2, alpha=0.0)


@pytest.mark.parametrize("extra,says", [
    (["lora.r=4", "kl.coef=0.05"], "the adapters off, which has no weights"),
    ([], "it needs kl.coef > 0"),
])
def test_a_sync_without_a_reference_to_move_is_refused(tiny_policy_dir, extra, says):
    from lmpo.config import ConfigError, load_config
    from lmpo.trainer.train_config import TrainConfig

    with pytest.raises(ConfigError, match=says):
        load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}", "kl.ref_sync_every=2",
                                          *extra]).validate()


def test_verl_refuses_it_by_name(tiny_policy_dir):
    from lmpo.experiments.engines.verl_launch import refusals
    from tests.test_robustness import tiny

    cfg = tiny(tiny_policy_dir, "kl.coef=0.05", "kl.ref_sync_every=4")
    assert "kl.ref_sync_every=4: verl 0.9.1's reference policy is frozen (no sync)" in \
        refusals(cfg)
