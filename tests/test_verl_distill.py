"""lmpo's `forward_kl_topk` (lmpo.losses.distill) equals verl 0.9.1's own: the FSDP logits
processor's divergence, masses and log-prob floor, then the loss function's clamp at 0."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("verl", reason="verl not installed: run `make test-verl`")
from verl.trainer.distillation.fsdp import losses as fsdp_losses  # noqa: E402

from lmpo.losses.distill import forward_kl_topk, teacher_topk  # noqa: E402


def jagged(x: torch.Tensor):
    """verl's packed [1, T, k] rows as its nested (jagged) tensors carry them."""
    return torch.nested.as_nested_tensor([x[0]], layout=torch.jagged)


@pytest.mark.parametrize("clamp", [None, -10.0, -2.0])
@pytest.mark.parametrize("k", [1, 4, 16])
def test_forward_kl_topk_equals_verls(k, clamp):
    g = torch.Generator().manual_seed(k)
    t, v = 13, 24
    teacher = torch.log_softmax(torch.randn(1, t, v, generator=g) * 3, -1)
    student = torch.randn(1, t, v, generator=g) * 3
    student[:, ::2] = 2 * teacher[:, ::2]  # sharper than the teacher: more of its top k
    ids, top = teacher_topk(teacher, k)
    config = SimpleNamespace(distillation_loss=SimpleNamespace(
        log_prob_min_clamp=clamp, use_chunked_topk=False, topk=k))
    theirs = fsdp_losses.compute_forward_kl_topk(
        student_logits=student, teacher_topk_log_probs=jagged(top), teacher_topk_ids=jagged(ids),
        config=config, data_format="thd")
    mine, q_mass, p_mass = forward_kl_topk(torch.log_softmax(student, -1), ids, top, clamp)
    # verl's loss function clamps the processor's divergence at 0 (losses.py)
    torch.testing.assert_close(mine, theirs["distillation_losses"].clamp_min(0.0), rtol=1e-6,
                               atol=1e-6)
    torch.testing.assert_close(q_mass, theirs["student_mass"], rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(p_mass, theirs["teacher_mass"], rtol=1e-6, atol=1e-7)
    assert (mine[:, 1::2] > 0).all()  # independent distributions: the clamp is idle
    assert k == 16 or (mine[:, ::2] == 0).any()  # a sharper student: it binds
