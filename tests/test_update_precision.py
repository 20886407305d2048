"""bfloat16 updates (optim.dtype): the autocast gradient is within a derived rounding bound
of the float32 one on a fixed batch, bfloat16 really ran, and a bad dtype is refused.

The bound. bfloat16 keeps 8 significant bits: round-to-nearest has unit roundoff
u = 2^-8, and a rounding error is uniform on [-u, u] x |x|, rms u / sqrt(3). Under autocast
a matmul rounds its two operands and its output (accumulating in float32): three
independent errors, so each output carries a relative error of rms u (the terms of an
inner product have mixed signs, so the sum's error relative to the sum is that of its
terms). A parameter's gradient is the product of an activation (a forward path through
up to D matmuls) and an output gradient (a backward path through up to D more), then the
weight-gradient matmul itself: at most m = 2D + 1 matmuls, whose errors add in quadrature,
so the relative L2 error of each parameter's gradient is about u sqrt(m). For the nano
policy (4 layers; q/k, QK^T, AV, o and two MLP matmuls in series per layer, plus the LM
head) D = 5 x 4 + 1 = 21 and m = 43: u sqrt(43) = 6.6 u. The residual stream, the
RMSNorms and the log-softmax stay float32, so this is an upper estimate, not a tight one
(observed: 1.5-3.8 u per tensor, 1.75 u over the whole gradient). The floor: float32 alone
differs by ~1e-6 relative, so an error above u / 4 shows that bfloat16 ran."""

from __future__ import annotations

import math

import pytest
import torch

from lmpo.config import ConfigError, load_config
from lmpo.losses import get_loss
from lmpo.models import build_policy, build_tokenizer
from lmpo.trainer.train_config import TrainConfig
from lmpo.trainer.update import accumulate_gradients
from tests.test_update import make_batch

U = 2.0 ** -8
F32 = torch.float32


def gradients(policy, batch, dtype: str) -> dict[str, torch.Tensor]:
    cfg = load_config(TrainConfig, None, [f"optim.dtype={dtype}", "kl.coef=0.1",
                                          "optim.entropy_coef=0.01"])
    policy.zero_grad(set_to_none=True)
    _, bad = accumulate_gradients(policy, None, get_loss("ppo_clip"), "token-mean", batch,
                                  torch.arange(len(batch.ids)), cfg)
    assert bad is None
    return {n: p.grad.clone() for n, p in policy.named_parameters()}


def test_bf16_gradient_is_within_the_derived_rounding_bound_of_float32():
    policy = build_policy("nano", build_tokenizer(), seed=0)
    layers = policy.config.num_hidden_layers
    batch = make_batch(policy)
    for name in ("resp_mask", "old_logp", "adv", "ref_logp"):
        setattr(batch, name, getattr(batch, name).to(F32))
    ref, low = gradients(policy, batch, "float32"), gradients(policy, batch, "bfloat16")
    assert all(p.dtype == F32 for p in policy.parameters())  # master weights stay float32
    assert all(g.dtype == F32 for g in low.values())
    bound = U * math.sqrt(2 * (5 * layers + 1) + 1)
    worst = max(float((low[n] - ref[n]).norm() / ref[n].norm()) for n in ref)
    total = math.sqrt(sum(float((low[n] - ref[n]).pow(2).sum()) for n in ref)
                      / sum(float(ref[n].pow(2).sum()) for n in ref))
    print(f"bf16 vs float32 gradient: worst tensor {worst / U:.2f} u, whole {total / U:.2f} u, "
          f"bound {bound / U:.2f} u")
    assert worst <= bound
    assert total >= U / 4  # bfloat16 really ran
    again = gradients(policy, batch, "float32")  # and float32 is untouched by the context
    assert all(torch.equal(again[n], ref[n]) for n in ref)


def test_an_unknown_update_dtype_is_refused_with_the_valid_ones():
    with pytest.raises(ConfigError, match="optim.dtype 'fp16' unknown; valid: float32, bfloat16"):
        load_config(TrainConfig, None, ["optim.dtype=fp16"])
