"""The prompt-mean aggregation (SkyRL's `loss_reduction: prompt_mean`, ScaleRL's
prompt-level aggregation): each prompt's token mean, then the mean over prompts; against
a float64 reference written from that sentence (no SkyRL release here ships it), exact
over micro-batches with the minibatch's row weights, in a run, and refused where it
cannot apply."""

from __future__ import annotations

import json

import pytest
import torch

from lmpo.config import ConfigError, load_config
from lmpo.experiments.engines.trl_mapping import trl_refusals
from lmpo.experiments.engines.verl_launch import refusals
from lmpo.losses import get_loss
from lmpo.masked import aggregate, prompt_weights
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig
from tests.test_trainer import tiny_cfg

D = torch.float64


def reference(loss, mask, groups) -> float:
    per_prompt = {}
    for row, m, g in zip(loss.tolist(), mask.tolist(), groups.tolist(), strict=True):
        total, count = per_prompt.get(g, (0.0, 0.0))
        per_prompt[g] = (total + sum(x * k for x, k in zip(row, m, strict=True)),
                         count + sum(m))
    means = [t / c for t, c in per_prompt.values() if c > 0]
    return sum(means) / len(means) if means else 0.0


def data(seed, b=10, t=6):
    g = torch.Generator().manual_seed(seed)
    loss = torch.randn(b, t, generator=g, dtype=D)
    mask = (torch.rand(b, t, generator=g) < 0.7).double()
    mask[2] = 0.0  # an empty response in a prompt with others
    mask[8:] = 0.0  # a prompt whose responses are all empty: not counted
    groups = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3])  # uneven groups
    return loss, mask, groups


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prompt_mean_is_the_mean_over_prompts_of_their_token_means(seed):
    loss, mask, groups = data(seed)
    got = aggregate(loss, mask, "prompt-mean", group_ids=groups)
    assert float(got) == pytest.approx(reference(loss, mask, groups), rel=1e-14)
    # not seq-mean-token-mean, nor token-mean, on uneven prompts
    assert float(got) != pytest.approx(float(aggregate(loss, mask, "seq-mean-token-mean")))
    assert float(got) != pytest.approx(float(aggregate(loss, mask, "token-mean")))


def test_micro_batches_with_the_minibatch_weights_add_up_to_the_whole():
    loss, mask, groups = data(3)
    logp = loss.clone().requires_grad_(True)
    fn = get_loss("ppo_clip")
    old, adv = loss.detach() - 0.1, torch.randn(len(loss), dtype=D)
    whole = aggregate(fn(logp, old, adv, mask)[0], mask, "prompt-mean", group_ids=groups)
    (g_whole,) = torch.autograd.grad(whole, logp)
    weights = prompt_weights(mask, groups)
    micro_logp = loss.clone().requires_grad_(True)
    total = 0.0
    for s in (slice(0, 3), slice(3, 4), slice(4, 10)):  # splits cut through prompts
        part = aggregate(fn(micro_logp[s], old[s], adv[s], mask[s])[0], mask[s],
                         "prompt-mean", row_weights=weights[s])
        part.backward()
        total += float(part.detach())
    assert total == pytest.approx(float(whole.detach()), rel=1e-13)
    torch.testing.assert_close(micro_logp.grad, g_whole, rtol=1e-13, atol=1e-16)


def test_prompt_mean_without_the_prompts_is_an_error():
    loss, mask, _ = data(0)
    with pytest.raises(ValueError, match="prompt-mean needs the rows' prompts"):
        aggregate(loss, mask, "prompt-mean")
    assert float(aggregate(loss, 0 * mask, "prompt-mean", group_ids=torch.arange(10))) == 0.0


def update_gradient(policy_dir, micro: int, agg: str):
    """The policy gradient of one minibatch of 6 responses to 3 prompts (uneven lengths),
    aggregated by `agg`, in micro-batches of `micro` (float64 model)."""
    from lmpo.models import load_policy
    from lmpo.trainer.batch import TrainBatch
    from lmpo.trainer.objective import build_objective
    from lmpo.trainer.update import accumulate_gradients

    cfg = load_config(TrainConfig, "grpo", [f"policy={policy_dir}", "rollout.max_new_tokens=5",
                                            f"optim.micro_batch_size={micro}"])
    policy, _ = load_policy(policy_dir)
    policy.double()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 40, (6, 9), generator=g)
    resp_mask = torch.ones(6, 5, dtype=D)
    resp_mask[0, 2:] = 0  # prompt 0: 2 + 5 tokens
    resp_mask[2, 1:] = 0  # prompt 1: 1 + 4 tokens
    resp_mask[3, 4:] = 0
    old = -torch.rand(6, 5, generator=g, dtype=D) - 3.0
    adv = torch.randn(6, 1, generator=g, dtype=D).expand(6, 5)
    batch = TrainBatch(ids, torch.ones_like(ids), ids[:, 4:], resp_mask, old, adv,
                       keep=torch.arange(6), group_ids=torch.tensor([0, 0, 1, 1, 2, 2]))
    policy.zero_grad()
    objective = build_objective(cfg, get_loss("importance_sampling"), agg)  # no clip
    _, bad = accumulate_gradients(policy, objective, batch, torch.arange(6), cfg)
    assert bad is None
    return torch.cat([p.grad.flatten() for p in policy.parameters() if p.grad is not None])


def test_the_update_aggregates_by_prompt_whatever_its_micro_batches(tiny_policy_dir):
    """In the trainer's own accumulation: micro-batches of 1 and 4 (cutting through
    prompts) give the gradient of one micro-batch of 6, to float32 rounding (the
    log-softmax is float32), and that gradient is not seq-mean-token-mean's or
    token-mean's on these uneven prompts."""
    whole = update_gradient(tiny_policy_dir, 6, "prompt-mean")
    scale = whole.norm()
    for micro in (1, 4):
        assert (update_gradient(tiny_policy_dir, micro, "prompt-mean") - whole).norm() \
            <= 1e-6 * scale
    for other in ("seq-mean-token-mean", "token-mean"):
        assert (update_gradient(tiny_policy_dir, 6, other) - whole).norm() > 1e-3 * scale


def test_a_run_with_prompt_mean_trains(tiny_policy_dir, tmp_path):
    cfg = tiny_cfg(tiny_policy_dir, "grpo", ["steps=2", "loss.agg=prompt-mean",
                                             "optim.micro_batch_size=3"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]


def test_where_prompt_mean_cannot_apply_it_is_refused(tiny_policy_dir):
    with pytest.raises(ConfigError, match="prompt-mean weighs each prompt's tokens"):
        tiny_cfg(tiny_policy_dir, "grpo", ["loss.agg=prompt-mean", "loss.nll_coef=0.1"])
    cfg = load_config(TrainConfig, "grpo", ["loss.agg=prompt-mean"])
    assert any(w.startswith("loss.agg=prompt-mean") for w in refusals(cfg))
    assert any(w.startswith("loss.agg=prompt-mean") for w in trl_refusals(cfg))
