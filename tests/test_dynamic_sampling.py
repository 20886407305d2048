"""DAPO's dynamic sampling with refill: rounds of generation until the batch holds only
groups whose rewards vary, every generated token counted."""

from __future__ import annotations

import json

import pytest
import torch

from lmpo.config import ConfigError, load_config
from lmpo.rollout.types import Rollout
from lmpo.trainer.filters import Drawn, concat, refill, varied_groups
from lmpo.trainer.loop import train
from lmpo.trainer.train_config import TrainConfig

PAD = 0


def rollout(tag: int, n: int, prompt_w: int, resp_w: int) -> Rollout:
    """Rows whose tokens encode (round tag, row): row i's prompt is tag*100 + i, left-padded;
    its response has i % resp_w + 1 tokens."""
    lengths = torch.tensor([i % resp_w + 1 for i in range(n)])
    resp_mask = (torch.arange(resp_w)[None] < lengths[:, None]).float()
    resp = torch.where(resp_mask.bool(), tag * 100 + torch.arange(n)[:, None], PAD)
    prompt = torch.full((n, prompt_w), PAD)
    prompt[:, -1] = tag * 100 + torch.arange(n)
    pmask = torch.zeros(n, prompt_w, dtype=torch.long)
    pmask[:, -1] = 1
    return Rollout(prompt, pmask, resp, resp_mask, logp=-resp_mask * (tag + 1),
                   regret=resp_mask * 0.5, values=None, stop_reason=["eos"] * n,
                   num_generated=int(lengths.sum()), lengths=lengths)


def drawn(tag: int, scores: list, prompt_w: int = 2, resp_w: int = 3) -> Drawn:
    n = len(scores)
    return Drawn([f"p{tag}-{i}" for i in range(n)], rollout(tag, n, prompt_w, resp_w),
                 list(scores), [s == 1.0 for s in scores], scorer_errors=tag)


def test_varied_groups_ignore_unscored_samples():
    assert varied_groups([1, 1, 0, 1, 0, 0, 0.3, 0.3], 2) == [1]
    assert varied_groups([1, None, 0, None, 1, 0], 3) == [0, 1]  # None takes no part


def test_refill_keeps_whole_varied_groups_in_order_and_counts_every_token():
    G = 2
    first = drawn(0, [1, 1, 0, 1, 0, 0, 1, 0])  # groups 1 and 3 vary; want 4 groups
    more = iter([drawn(1, [0, 0, 0, 0, 1, 1, 0, 0], prompt_w=4, resp_w=5),  # nothing varies
                 drawn(2, [0, 1, 1, 1, 1, 0, 0, 1], resp_w=2)])  # 0, 2, 3 vary: one surplus
    batch, m = refill(first, lambda: next(more), group=G, max_batches=5, pad_token_id=PAD)
    assert len(batch.problems) == 24  # every generated sample: the population
    kept = batch.chosen.nonzero().flatten()
    assert [batch.problems[i] for i in kept] == ["p0-2", "p0-3", "p0-6", "p0-7", "p2-0",
                                                 "p2-1", "p2-4", "p2-5"]
    assert [batch.scored[i] for i in kept] == [0, 1, 1, 0, 0, 1, 1, 0]
    std = m.pop("reward/std")
    assert std == pytest.approx(float(torch.tensor([1.0] * 11 + [0.0] * 13).std()))
    assert m == {"data/gen_batches": 3.0, "data/groups_dropped": 2 + 4 + 1,
                 "data/groups_unused": 1.0, "reward/mean": 11 / 24, "reward/accuracy": 11 / 24}
    r = batch.rollout
    assert r.num_generated == sum(x.rollout.num_generated for x in
                                  (first, drawn(1, [0] * 8, 4, 5), drawn(2, [0] * 8, resp_w=2)))
    assert r.prompt_ids.shape == (24, 4) and r.response_ids.shape == (24, 5)  # widest round
    assert r.prompt_ids[kept, -1].tolist() == [2, 3, 6, 7, 200, 201, 204, 205]
    assert r.lengths[kept].tolist() == [3, 1, 1, 2, 1, 2, 1, 2]
    assert torch.equal(r.response_mask.sum(-1), r.lengths.float())
    assert torch.equal(r.logp[kept], -r.response_mask[kept]
                       * torch.tensor([1.0] * 4 + [3.0] * 4)[:, None])
    assert (r.response_ids[r.response_mask == 0] == PAD).all()
    assert batch.scorer_errors == 0 + 1 + 2


def test_refill_stops_after_max_batches_with_what_it_has():
    more = iter([drawn(1, [1, 1, 1, 0])])
    batch, m = refill(drawn(0, [0, 0, 0, 1]), lambda: next(more), group=2, max_batches=2,
                      pad_token_id=PAD)
    assert [batch.problems[i] for i in batch.chosen.nonzero().flatten()] == [
        "p0-2", "p0-3", "p1-2", "p1-3"] and m["data/gen_batches"] == 2
    flat, m = refill(drawn(0, [0, 0, 1, 1]), lambda: drawn(1, [1, 1, 0, 0]), group=2,
                     max_batches=3, pad_token_id=PAD)
    assert len(flat.problems) == 12 and not flat.chosen.any()  # nothing varied: nothing kept
    assert flat.rollout.num_generated == 3 * drawn(0, [0] * 4).rollout.num_generated
    assert m["data/groups_dropped"] == 6.0


def test_concat_of_one_rollout_is_that_rollout():
    r = rollout(3, 4, 2, 3)
    c = concat([r], PAD, r.num_generated)
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "logp", "lengths"):
        assert torch.equal(getattr(c, name), getattr(r, name)), name


def test_a_refilled_dapo_step_trains_on_varied_groups(sft_run, tmp_path):
    cfg = load_config(TrainConfig, "dapo", [
        f"policy={sft_run[0]}", "steps=3", "rollout.max_gen_batches=4",
        "log.eval_every=1000", "log.eval_per_tier=4", "log.tensorboard=false"])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").open()]
    for r in rows:
        assert 1 <= r["data/gen_batches"] <= 4 and r["train/updates"] > 0
        if r["data/gen_batches"] > 1:  # the extra rounds' tokens are paid for
            assert r["tokens/generated"] > r["response/length_mean"] * 64
    assert any(r["data/groups_dropped"] > 0 for r in rows)


def test_refill_needs_dynamic_sampling_in_the_group_family():
    with pytest.raises(ConfigError, match="max_gen_batches 3 refills"):
        load_config(TrainConfig, "grpo", ["rollout.max_gen_batches=3"])
    with pytest.raises(ConfigError, match="dynamic_sampling drops groups .* needs the group "
                                          "family"):
        load_config(TrainConfig, "ppo_clip", ["rollout.max_gen_batches=3",
                                              "rollout.dynamic_sampling=true"])


def test_entropy_covers_every_generated_sample_and_the_kept_subset_has_its_own(sft_run,
                                                                              tmp_path):
    """Without a filter the population is the update's batch: policy/entropy equals the
    kept-subset entropy. With dynamic sampling (and a refill) both are logged and differ;
    the shares of samples that entered the update say why."""
    rows = {}
    for name, preset in (("grpo", "grpo"), ("dapo", "dapo")):
        cfg = load_config(TrainConfig, preset, [
            f"policy={sft_run[0]}", "steps=3", "rollout.max_gen_batches=3",
            "log.eval_every=1000", "log.eval_per_tier=4", "log.tensorboard=false"]
            if preset == "dapo" else [f"policy={sft_run[0]}", "steps=3",
                                      "log.eval_every=1000", "log.eval_per_tier=4",
                                      "log.tensorboard=false", "log.entropy_head_tokens=999"])
        train(cfg, tmp_path / name, progress=False)
        rows[name] = [json.loads(x) for x in (tmp_path / name / "metrics.jsonl").open()]
    for r in rows["grpo"]:
        assert r["policy/entropy"] == pytest.approx(r["policy/entropy_kept"], rel=1e-6)
        assert r["data/update_share"] == 1.0
        assert r["policy/entropy_head"] == r["policy/entropy"]  # k beyond every response
    assert all("policy/entropy_head" not in r for r in rows["dapo"])  # k = 0: not logged
    assert any(abs(r["policy/entropy"] - r["policy/entropy_kept"]) > 1e-4
               for r in rows["dapo"])
    assert all(r["data/update_share"] < 1.0 for r in rows["dapo"] if r["data/groups_dropped"])


def test_the_head_entropy_reads_each_responses_first_k_tokens():
    """By hand: two responses of 3 and 1 tokens; k = 2 takes tokens (0.9, 0.5) of the first
    and (0.2) of the second: mean 1.6 / 3."""
    from types import SimpleNamespace

    from lmpo.trainer.stages import population_metrics
    ent = torch.tensor([[0.9, 0.5, 0.1], [0.2, 7.0, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], dtype=torch.float64)
    scored = SimpleNamespace(rollout=SimpleNamespace(entropy=ent, response_mask=mask),
                             generated=2)
    keep = torch.tensor([0, 1])
    row = population_metrics(scored, keep, None, head_tokens=2)
    assert row["policy/entropy_head"] == pytest.approx(1.6 / 3, abs=1e-15)
    assert row["policy/entropy"] == pytest.approx(1.7 / 4, abs=1e-15)
    assert "policy/entropy_head" not in population_metrics(scored, keep, None)
