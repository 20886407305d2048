"""The vocabulary-wide mismatch (`log.full_mismatch`, SkyRL #2201): the chunked, bucketed
TV and KL between the sampler's and the policy's next-token distributions equal a plain
float64 recompute position by position; equal models give 0; Pinsker's inequality holds;
a short run logs both beside the sampled-token mismatch."""

from __future__ import annotations

import pytest
import torch

from lmpo.masked import position_ids
from lmpo.models import load_policy
from lmpo.models.forward import distribution_gap
from lmpo.rollout import RolloutModel
from tests.test_precision import rollout_gap


def reference(sampler, policy, ids, mask, t):
    """One padded pass of each model, its logits in float64: TV and KL(mu || pi) at the
    positions that predict each response token."""
    pos = position_ids(mask)
    with torch.no_grad():
        lq, lp = (torch.log_softmax(m(input_ids=ids, attention_mask=mask, position_ids=pos)
                                    .logits[:, -t - 1:-1].double(), -1) for m in (sampler, policy))
    tv = 0.5 * (lq.exp() - lp.exp()).abs().sum(-1)
    kl = (lq.exp() * (lq - lp)).sum(-1)
    m = mask[:, -t:].double()
    return tv * m, kl * m


@pytest.mark.parametrize("dtype", ["bfloat16", "fp4_e2m1"])
def test_the_gap_equals_a_float64_recompute(tiny_policy_dir, dtype):
    policy, tok = load_policy(tiny_policy_dir)
    sampler = RolloutModel(policy, dtype)()
    r = rollout_gap(policy, tok, sampler, True)
    ids, mask = r.full_sequences()
    t = r.response_ids.shape[1]
    tv, kl = distribution_gap(sampler, policy, ids, mask, r.response_ids, rows_per_chunk=3)
    want_tv, want_kl = reference(sampler, policy, ids, mask, t)
    assert float(want_tv.max()) > 1e-4  # a real mismatch
    torch.testing.assert_close(tv.double(), want_tv, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(kl.double(), want_kl.clamp(min=0), rtol=1e-3, atol=1e-6)
    valid = mask[:, -t:].bool()
    assert (tv[valid] <= (kl[valid] / 2).sqrt() + 1e-5).all()  # Pinsker
    same_tv, same_kl = distribution_gap(policy, policy, ids, mask, r.response_ids)
    assert float(same_tv.abs().max()) == 0.0 and float(same_kl.abs().max()) == 0.0


def test_a_short_run_logs_both_mismatches(tiny_policy_dir, tmp_path):
    from lmpo.trainer.checkpoint import read_rows
    from lmpo.trainer.loop import train
    from tests.test_robustness import tiny

    cfg = tiny(tiny_policy_dir, "steps=2", "rollout.dtype=fp4_e2m1", "log.policy_kl_every=1",
               "log.full_mismatch=true")
    train(cfg, tmp_path / "run", progress=False)
    rows = read_rows(tmp_path / "run" / "metrics.jsonl")
    assert all(r["rollout/full_tv"] > 0 and r["rollout/full_kl"] > 0 for r in rows)
    assert all(r["rollout/logp_mismatch"] > 0 for r in rows)
    off = tiny(tiny_policy_dir, "steps=1", "log.full_mismatch=true")  # float32: no gap to log
    train(off, tmp_path / "off", progress=False)
    assert "rollout/full_tv" not in read_rows(tmp_path / "off" / "metrics.jsonl")[0]
