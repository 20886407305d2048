"""The update step: micro-batching changes nothing but memory; metrics average over the
updates actually applied."""

from __future__ import annotations

import pytest
import torch

from lmpo.config import load_config
from lmpo.losses import get_loss
from lmpo.models import ValueModel, build_policy, build_tokenizer
from lmpo.trainer.batch import TrainBatch
from lmpo.trainer.objective import build_objective
from lmpo.trainer.state import RunState
from lmpo.trainer.train_config import TrainConfig
from lmpo.trainer.update import accumulate_gradients, update

D = torch.float64


def make_batch(policy, b=64, p=5, t=9, seed=0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 60, (b, p + t), generator=g)
    lengths = torch.randint(1, t + 1, (b,), generator=g)
    resp_mask = (torch.arange(t)[None, :] < lengths[:, None]).to(D)
    prompt_mask = torch.ones(b, p, dtype=torch.long)
    prompt_mask[: b // 2, :2] = 0  # left padding on half the rows
    mask = torch.cat([prompt_mask, resp_mask.long()], 1)
    with torch.no_grad():
        from lmpo.models.forward import forward_logprobs

        logp, _ = forward_logprobs(policy, ids, mask, ids[:, p:])
    noise = 0.4 * torch.randn(b, t, generator=g, dtype=D)  # ratios away from 1: clipping acts
    return TrainBatch(ids=ids, mask=mask, resp_ids=ids[:, p:], resp_mask=resp_mask,
                      old_logp=(logp + noise) * resp_mask,
                      adv=torch.randn(b, t, generator=g, dtype=D), keep=torch.arange(b),
                      ref_logp=(logp - 0.1 * noise) * resp_mask,
                      old_values=torch.randn(b, t, generator=g, dtype=D) * resp_mask,
                      returns=torch.randn(b, t, generator=g, dtype=D) * resp_mask)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batch_size_does_not_change_the_gradient(agg):
    """One minibatch of 64 sequences in one micro-batch or in 8 of 8: the same policy and
    critic gradients to rtol 1e-10 (float64 policy), with the policy, KL, entropy and value
    terms all present; the batch's largest ratio is the same either way."""
    tok = build_tokenizer()
    policy = build_policy("nano", tok, seed=0).to(D)
    critic = ValueModel.from_policy(policy).to(D)
    batch = make_batch(policy)
    loss_fn = get_loss("cegppo", beta1=0.5, beta2=1.0)
    grads, ratio_max = {}, {}
    for micro in (64, 8):
        cfg = load_config(TrainConfig, None, [f"optim.micro_batch_size={micro}", "kl.coef=0.1",
                                              "optim.entropy_coef=0.01", "advantage.name=gae",
                                              "rollout.group_size=1"])
        policy.zero_grad(set_to_none=True)
        critic.zero_grad(set_to_none=True)
        metrics, bad = accumulate_gradients(policy, build_objective(cfg, loss_fn, agg, critic),
                                            batch, torch.arange(64), cfg)
        assert bad is None and {"loss/term_kl", "loss/term_entropy", "value/loss"} <= set(metrics)
        grads[micro] = [p.grad.clone() for p in (*policy.parameters(), *critic.parameters())]
        ratio_max[micro] = metrics["loss/ratio_max"]
    assert ratio_max[64] == pytest.approx(ratio_max[8], rel=1e-12)  # the max, not a mean of 8
    assert len(grads[64]) == len(grads[8])
    for a, b in zip(grads[64], grads[8], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("bias_correction", [False, True])
def test_the_kl_term_with_and_without_its_bias_correction(bias_correction):
    """The KL loss term alone (a policy loss of 0): coef * token-mean of k3, times the
    differentiable ratio exp(logp - old_logp) with kl.bias_correction; gradients against
    the same quantity written out here, float64, rtol 1e-10."""
    from lmpo.losses import aggregate, kl_penalty
    from lmpo.models.forward import forward_logprobs

    tok = build_tokenizer()
    policy = build_policy("nano", tok, seed=0).to(D)
    batch = make_batch(policy, b=16, seed=2)
    cfg = load_config(TrainConfig, None, ["kl.coef=0.3", f"kl.bias_correction={bias_correction}",
                                          "rollout.batch_size=16"])

    def zero_loss(logp, old, adv, mask):
        return logp * 0.0, {}

    policy.zero_grad(set_to_none=True)
    accumulate_gradients(policy, build_objective(cfg, zero_loss, "token-mean"), batch,
                         torch.arange(16), cfg)
    ours = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad(set_to_none=True)
    logp, _ = forward_logprobs(policy, batch.ids, batch.mask, batch.resp_ids)
    kl = kl_penalty(logp, batch.ref_logp, "k3")
    if bias_correction:
        kl = kl * torch.exp(logp - batch.old_logp)
    (0.3 * aggregate(kl, batch.resp_mask, "token-mean")).backward()
    for a, b in zip(ours, [p.grad for p in policy.parameters()], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_the_off_policy_mask_leaves_out_what_it_names():
    """loss.off_policy_mask_threshold: the policy term's gradient equals the loss's own
    per-token loss times OPSM's mask, written out here (float64, rtol 1e-10), and the
    mask removes tokens on this batch."""
    from lmpo.losses import aggregate, off_policy_sequence_mask
    from lmpo.models.forward import forward_logprobs

    tok = build_tokenizer()
    policy = build_policy("nano", tok, seed=0).to(D)
    batch = make_batch(policy, b=16, seed=3)
    cfg = load_config(TrainConfig, None, ["loss.off_policy_mask_threshold=0.05",
                                          "rollout.batch_size=16", "optim.micro_batch_size=4"])
    loss_fn = get_loss("ppo_clip")
    policy.zero_grad(set_to_none=True)
    metrics, _ = accumulate_gradients(policy, build_objective(cfg, loss_fn, "token-mean"), batch,
                                      torch.arange(16), cfg)
    assert metrics["loss/opsm/masked_frac"] > 0.05
    ours = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad(set_to_none=True)
    logp, _ = forward_logprobs(policy, batch.ids, batch.mask, batch.resp_ids)
    tok_loss, _ = loss_fn(logp, batch.old_logp, batch.adv, batch.resp_mask)
    keep, _ = off_policy_sequence_mask(logp, batch.old_logp, batch.adv, batch.resp_mask, 0.05)
    aggregate(tok_loss * keep, batch.resp_mask, "token-mean").backward()
    for a, b in zip(ours, [p.grad for p in policy.parameters()], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_top_entropy_selection_is_the_minibatchs_and_micro_batch_invariant():
    """loss.top_entropy_quantile 0.2: the policy term over the tokens whose entropy is at
    least the minibatch's 0.8 quantile; the same gradient in one micro-batch or four, and
    equal to that selection written out here (float64, rtol 1e-10)."""
    from lmpo.losses import aggregate
    from lmpo.models.forward import forward_logprobs

    tok = build_tokenizer()
    policy = build_policy("nano", tok, seed=0).to(D)
    batch = make_batch(policy, b=16, seed=4)
    loss_fn = get_loss("ppo_clip")
    grads = {}
    for micro in (16, 4):
        cfg = load_config(TrainConfig, None, ["loss.top_entropy_quantile=0.2",
                                              "rollout.batch_size=16",
                                              f"optim.micro_batch_size={micro}"])
        policy.zero_grad(set_to_none=True)
        objective = build_objective(cfg, loss_fn, "token-mean")
        metrics, _ = accumulate_gradients(policy, objective, batch, torch.arange(16), cfg)
        assert 0.15 < metrics["loss/entropy_mask/kept_frac"] < 0.25
        grads[micro] = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad(set_to_none=True)
    logp, ent = forward_logprobs(policy, batch.ids, batch.mask, batch.resp_ids)
    valid = batch.resp_mask > 0
    keep = (ent.detach() >= torch.quantile(ent.detach()[valid], 0.8)) & valid
    tok_loss, _ = loss_fn(logp, batch.old_logp, batch.adv, batch.resp_mask)
    aggregate(tok_loss * keep, batch.resp_mask, "token-mean").backward()
    for micro in (16, 4):
        for a, b in zip(grads[micro], [p.grad for p in policy.parameters()], strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-14)


def test_metrics_average_over_the_updates_actually_applied(monkeypatch):
    """4 minibatches, the second non-finite: 3 updates are applied and the reported loss
    metric is the mean of those 3, not a sum divided by 4."""
    import lmpo.trainer.update as upd

    tok = build_tokenizer()
    policy = build_policy("nano", tok, seed=0)
    batch = make_batch(policy, b=16, seed=1)
    batch = TrainBatch(**{k: (v.float() if isinstance(v, torch.Tensor) and v.is_floating_point()
                              else v) for k, v in vars(batch).items()})
    cfg = load_config(TrainConfig, None, ["optim.minibatches=4", "rollout.batch_size=16"])
    calls = iter([1.0, float("nan"), 3.0, 5.0])

    def fake(policy_, objective_, batch_, mb, cfg_, observers=(), schedules=None):
        value = next(calls)
        if value != value:
            return {}, "policy"
        out = policy_(input_ids=batch_.ids[mb][:, :3]).logits.sum() * 0  # a zero gradient
        out.backward()
        return {"loss/x": value, "loss/w_min": -value, "loss/w_max": 10 - value}, None

    monkeypatch.setattr(upd, "accumulate_gradients", fake)
    state = RunState(policy=policy, reference=policy, opt=torch.optim.SGD(policy.parameters()),
                     sampler=None, estimator=None,
                     rngs={"shuffle": torch.Generator().manual_seed(0)})
    out = update(state, batch, None, cfg, lr=1e-3, step=1)
    assert out["train/updates"] == 3 and out["loss/x"] == pytest.approx(3.0)
    assert out["loss/w_min"] == -5.0 and out["loss/w_max"] == 9.0
    assert state.counters.skipped == 1 and state.counters.nonfinite_streak == 0
