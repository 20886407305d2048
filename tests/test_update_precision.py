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
from lmpo.trainer.objective import build_objective
from lmpo.trainer.train_config import TrainConfig
from lmpo.trainer.update import accumulate_gradients
from tests.test_update import make_batch

U = 2.0 ** -8
F32 = torch.float32


def gradients(policy, batch, dtype: str) -> dict[str, torch.Tensor]:
    cfg = load_config(TrainConfig, None, [f"optim.dtype={dtype}", "kl.coef=0.1",
                                          "optim.entropy_coef=0.01"])
    policy.zero_grad(set_to_none=True)
    _, bad = accumulate_gradients(policy, build_objective(cfg, get_loss("ppo_clip"), "token-mean"),
                                  batch, torch.arange(len(batch.ids)), cfg)
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


@pytest.mark.parametrize("update_dtype", ["float32", "bfloat16"])
def test_the_recompute_runs_in_the_updates_precision(update_dtype, tiny_policy_dir, tmp_path):
    """With rollout.old_logp: recompute the anchor is the trained policy's own log-probs in
    the update's precision, so one update over the whole batch in one micro-batch starts
    every ratio at 1: only float32 accumulation order differs between the two passes
    (~1e-6), far below the bf16-vs-float32 gap a float32 anchor leaves (ratio_max 1.0024
    on this policy with the recompute outside autocast). The reference, equal to the policy
    at step 1, is read the same way: its KL term is 0."""
    import json

    from lmpo.trainer.loop import train
    from tests.test_trainer import tiny_cfg

    cfg = tiny_cfg(tiny_policy_dir, "grpo", [
        "steps=1", f"optim.dtype={update_dtype}", "rollout.old_logp=recompute",
        "optim.minibatches=1", "optim.epochs=1", "optim.micro_batch_size=8",
        "kl.coef=0.1", "log.policy_kl_every=1000"])
    train(cfg, tmp_path / "run", progress=False)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert abs(row["loss/ratio_max"] - 1) < 1e-4 and abs(row["loss/ratio_mean"] - 1) < 1e-5
    assert abs(row["loss/approx_kl"]) < 1e-8
    assert abs(row["loss/term_kl"]) < 1e-5
