"""lmpo's losses through prime-rl's custom-loss contract (prime-rl is not on the package
registry): a per-sample call with prime-rl's LossInputs fields returns LossOutputs(loss,
metrics), and prime-rl's reduction (sum over samples / global loss tokens) of those calls
equals lmpo's token-mean over the padded batch, float64."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from lmpo.errors import ConfigError
from lmpo.integrations import prime_rl
from lmpo.losses import aggregate, get_loss, list_losses


@dataclass
class LossInputs:  # prime-rl's fields (prime_rl.trainer.rl.loss.LossInputs)
    trainer_logprobs: torch.Tensor
    inference_logprobs: torch.Tensor
    ref_logprobs: torch.Tensor | None
    advantages: torch.Tensor
    loss_mask: torch.Tensor
    loss_weights: torch.Tensor | None = None


def padded_batch(seed, b=6, t=9):
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(b, t, generator=g, dtype=torch.float64) * 0.9 + 0.05)
    logp = (old + 0.5 * torch.randn(b, t, generator=g, dtype=torch.float64)).clamp(max=-1e-4)
    adv = torch.randn(b, generator=g, dtype=torch.float64)[:, None].expand(b, t).clone()
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    mask = torch.arange(t)[None] < lengths[:, None]
    weights = torch.rand(b, t, generator=g, dtype=torch.float64) + 0.5
    return logp, old, adv, mask, weights, lengths


def prime_reduction(name, hparams, logp, old, adv, mask, lengths, weights=None, agg=None):
    """prime-rl's compute_loss for the rl component: each sample (its own length, as
    packed) through the loss, summed, over the global count of loss tokens."""
    total, metrics = 0.0, []
    kwargs = {"name": name, "hparams": hparams} | ({"agg": agg} if agg else {})
    for i, n in enumerate(lengths.tolist()):
        out = prime_rl.loss(LossInputs(logp[i, :n], old[i, :n], None, adv[i, :n],
                                       mask[i, :n],
                                       None if weights is None else weights[i, :n]), **kwargs)
        assert out.loss.dim() == 0 and all(v.dim() == 0 for v in out.metrics.values())
        total, metrics = total + out.loss, metrics + [out.metrics]
    return total / mask.sum(), metrics


@pytest.mark.parametrize("name", [n for n in list_losses()])
def test_every_loss_through_prime_rls_reduction_is_lmpos_token_mean(name):
    torch.manual_seed(0)  # Clip-Cov draws its tokens: one draw per call differs, see below
    logp, old, adv, mask, weights, lengths = padded_batch(1)
    lp = logp.clone().requires_grad_(True)
    ours, _ = prime_reduction(name, {}, lp, old, adv, mask, lengths, weights)
    if name in ("clip_cov", "kl_cov"):  # batch-level selections: per sample, by design
        assert torch.isfinite(ours)
        return
    lp2 = logp.clone().requires_grad_(True)
    tok, _ = get_loss(name)(lp2, old, adv, mask.double())
    want = aggregate(tok * weights, mask.double(), "token-mean")
    torch.testing.assert_close(ours, want, rtol=1e-12, atol=1e-14)
    (ga,) = torch.autograd.grad(ours, lp)
    (gb,) = torch.autograd.grad(want, lp2)
    torch.testing.assert_close(ga, gb, rtol=1e-12, atol=1e-14)


def test_prime_rls_default_loss_as_its_formula_by_hand():
    """dppo_tv_kl with prime-rl's defaults on one sample: tokens 0 and 2 moved past 0.2
    with their advantage's sign and leave the policy term; the KL term stays on all."""
    p = torch.tensor([0.9, 0.5, 0.1, 0.45], dtype=torch.float64)
    q = torch.tensor([0.5, 0.5, 0.5, 0.5], dtype=torch.float64)
    a = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=torch.float64)
    out = prime_rl.loss(LossInputs(p.log(), q.log(), None, a, torch.ones(4, dtype=torch.bool)),
                        name="dppo_tv_kl")
    rho = (p / q).log()
    keep = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
    want = (-keep * a * p / q + 1e-3 * rho ** 2).sum()
    torch.testing.assert_close(out.loss, want, rtol=1e-12, atol=1e-15)
    assert float(out.metrics["prime/masked_frac"]) == 0.5


def test_seq_mean_token_mean_is_the_samples_mean_and_other_modes_are_refused():
    logp, old, adv, mask, _, lengths = padded_batch(2)
    ours, _ = prime_reduction("ppo_clip", {"eps_high": 0.28}, logp, old, adv, mask, lengths,
                              agg="seq-mean-token-mean")
    tok, _ = get_loss("ppo_clip", eps_high=0.28)(logp, old, adv, mask.double())
    seq_mean = aggregate(tok, mask.double(), "seq-mean-token-mean")
    torch.testing.assert_close(ours, seq_mean * len(lengths) / mask.sum(), rtol=1e-12,
                               atol=1e-14)
    with pytest.raises(ConfigError, match="valid: token-mean, seq-mean-token-mean"):
        prime_reduction("ppo_clip", {}, logp, old, adv, mask, lengths,
                        agg="seq-mean-token-sum-norm")
