"""Reward models: the Bradley-Terry loss, scoring invariances, the pairs files, training
on the built-in pairs, the saved folder, and RL against a frozen reward model."""

from __future__ import annotations

import json
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.config import load_config
from lmpo.errors import ConfigError
from lmpo.reward_model_training import RMConfig, run_rm
from lmpo.rewards.preferences import (
    Pair,
    builtin_pairs,
    load_pairs,
    perturbations,
    true_reward,
    write_pairs,
)
from lmpo.rewards.reward_model import (
    RunningMoments,
    TextEncoder,
    bt_loss,
    load_reward_model,
    pad_batch,
    sequence_scores,
)
from lmpo.tasks import DataError, get_task

D = torch.float64


# ---------------------------------------------------------------- the loss
def reference_bt(c, r, m, coef):
    """Float64, element by element: mean of log(1 + exp(-(c - r - m))) + coef mean (c+r)^2."""
    import math

    n = len(c)
    terms = zip(c, r, m, strict=True)
    loss = sum(math.log1p(math.exp(-(ci - ri - mi))) for ci, ri, mi in terms) / n
    return loss + coef * sum((ci + ri) ** 2 for ci, ri in zip(c, r, strict=True)) / n


def test_bt_loss_and_gradient_match_a_float64_hand_reference():
    g = torch.Generator().manual_seed(0)
    c, r, m = (torch.randn(7, generator=g, dtype=D) for _ in range(3))
    m = m.abs()
    for margin, coef in ((None, None), (m, None), (None, 0.01), (m, 0.3)):
        cc, rr = c.clone().requires_grad_(), r.clone().requires_grad_()
        loss = bt_loss(cc, rr, margin, coef)
        mm = [0.0] * 7 if margin is None else margin.tolist()
        expect = reference_bt(c.tolist(), r.tolist(), mm, coef or 0.0)
        assert loss.item() == pytest.approx(expect, rel=1e-12, abs=1e-14)
        loss.backward()
        # d/dc = -sigmoid(-(c - r - m)) / n + 2 coef (c + r) / n; d/dr = +sigmoid(...) / n + ...
        s = torch.sigmoid(-(c - r - (margin if margin is not None else 0)))
        centre = 2 * (coef or 0.0) * (c + r) / 7
        torch.testing.assert_close(cc.grad, -s / 7 + centre, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(rr.grad, s / 7 + centre, rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(lambda a, b: bt_loss(a, b, m, 0.1),
                                    (c.clone().requires_grad_(), r.clone().requires_grad_()))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(-1e3, 1e3), min_size=0, max_size=6), min_size=1, max_size=5))
def test_running_moments_equal_the_moments_of_everything_seen(batches):
    rm = RunningMoments()
    for b in batches:
        rm.update(torch.tensor(b, dtype=D))
    flat = torch.tensor([x for b in batches for x in b], dtype=D)
    assert rm.n == flat.numel()
    if flat.numel():
        assert rm.mean == pytest.approx(float(flat.mean()), rel=1e-9, abs=1e-9)
    if flat.numel() > 1:
        assert rm.std == pytest.approx(float(flat.std()), rel=1e-7, abs=1e-7)
    again = RunningMoments()
    again.load_state_dict(rm.state_dict())
    assert again.state_dict() == rm.state_dict()


# ---------------------------------------------------------------- pairs
def test_the_builtin_pairs_follow_the_hidden_preference():
    task = get_task("chain_sum")
    problems = task.sample(50, random.Random(0), cluster="t3d1")
    samples = {p.prompt: ["1#1", task.solution(p) + "0"] for p in problems}
    pairs = builtin_pairs(task, problems, per_problem=4, seed=0, samples=samples)
    by_prompt = {p.prompt: p for p in problems}
    assert len(pairs) >= 3 * len(problems)
    for pair in pairs:
        p = by_prompt[pair.prompt]
        gap = true_reward(task, p, pair.chosen) - true_reward(task, p, pair.rejected)
        assert gap > 0 and pair.margin == pytest.approx(gap)
    p = problems[0]
    sol = task.solution(p)
    assert true_reward(task, p, sol) > true_reward(task, p, sol.replace("#", ",0+0=0#")) > 0
    assert true_reward(task, p, "nonsense") == 0.0
    kinds = perturbations(task, p, random.Random(0))
    assert kinds[0] == sol and len(kinds) == 4  # solution, no answer, wrong number, longer


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ('["a"]', "expected a JSON object"),
    ('{"prompt": "1+1=", "chosen": "2"}', "missing required field(s) ['rejected']"),
    ('{"prompt": "1+1=", "chosen": 2, "rejected": "3"}', "field 'chosen' must be a string"),
    ('{"prompt": "1+1=", "chosen": "2", "rejected": "3", "margin": "big"}',
     "field 'margin' must be a number"),
])
def test_a_malformed_pairs_line_names_its_file_and_line(tmp_path, line, message):
    path = tmp_path / "pairs.jsonl"
    good = json.dumps({"prompt": "1+1=", "chosen": "#2", "rejected": "#3"})
    path.write_text(good + "\n\n" + line + "\n")
    with pytest.raises(DataError) as err:
        load_pairs(path)
    assert f"{path}:3" in str(err.value) and message in str(err.value)


def test_pairs_round_trip_and_empty_or_missing_files_fail(tmp_path):
    pairs = [Pair("1+1=", "#2", "#3", 1.0), Pair("2+2=", "#4", "#5")]
    assert load_pairs(write_pairs(pairs, tmp_path / "p.jsonl")) == pairs
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="no pairs"):
        load_pairs(tmp_path / "empty.jsonl")
    with pytest.raises(DataError, match="no such pairs file"):
        load_pairs(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------- scoring
def tiny_rm(tiny_policy_dir):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_policy_dir)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(
        tiny_policy_dir, num_labels=1, pad_token_id=tok.pad_token_id)
    torch.nn.init.normal_(model.score.weight, std=1.0)  # scores far from 0: a real test
    return model.eval(), tok


def test_scores_do_not_depend_on_padding_side_or_batch_company(tiny_policy_dir):
    model, tok = tiny_rm(tiny_policy_dir)
    enc = TextEncoder(tok, "raw")
    texts = [("12+7-3=", "19,16#16"), ("1+1=", "#2"), ("5-9+4+1=", "-4,0,1#1"), ("3=", "")]
    seqs = [enc(p, c) for p, c in texts]
    with torch.no_grad():
        alone = torch.cat([sequence_scores(model, *pad_batch([s], tok.pad_token_id))
                           for s in seqs])
        for side in ("left", "right"):
            batched = sequence_scores(model, *pad_batch(seqs, tok.pad_token_id, side))
            torch.testing.assert_close(batched, alone, rtol=0, atol=1e-5)
            mixed = sequence_scores(model, *pad_batch([seqs[2], seqs[0]] * 3,
                                                      tok.pad_token_id, side))
            torch.testing.assert_close(mixed[:2], alone[[2, 0]], rtol=0, atol=1e-5)
        # Hugging Face's own forward (right padding, pooled at the last non-pad token)
        ids, mask = pad_batch(seqs, tok.pad_token_id, "right")
        hf = model(input_ids=ids, attention_mask=mask).logits.squeeze(-1)
    torch.testing.assert_close(hf, alone, rtol=0, atol=1e-5)
    assert alone.std() > 0.1  # distinct texts, distinct scores


# ---------------------------------------------------------------- training
@pytest.fixture(scope="module")
def trained_rm(sft_run, tmp_path_factory):
    """`lmpo rm` on built-in chain-sum t3d1 pairs with the warm-started trunk and its
    samples (1000 problems, 6 epochs: about 40 s)."""
    policy, _ = sft_run
    out = tmp_path_factory.mktemp("rm") / "rm"
    cfg = load_config(RMConfig, None, [f"trunk={policy}", f"sample_policy={policy}",
                                       "clusters=[t3d1]", "problems=1000", "epochs=6",
                                       f"out={out}", "threads=2"])
    return out, run_rm(cfg, progress=False)


def test_a_reward_model_learns_the_builtin_preference(trained_rm):
    """Held-out pairs (from problems no training pair uses): accuracy >= 0.70, where chance
    is 0.5 (a fresh random head scores 0.65-0.73 here, one of the opposite sign 0.27-0.35).
    Observed 0.76 with this fixture's 1000 problems and 6 epochs; the preset's 2000 problems
    and 8 epochs reach 0.85 (docs/reward-models.md)."""
    out, summary = trained_rm
    assert summary["heldout"]["n"] >= 100
    print("held-out pair accuracy", summary["heldout_before"]["accuracy"], "->",
          summary["heldout"]["accuracy"])
    assert summary["heldout"]["accuracy"] >= 0.70
    assert summary["heldout"]["gap_mean"] > 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5, 6] and rows[-1]["train/loss"] < 0.6931


def test_the_saved_folder_is_a_plain_sequence_classification_model(trained_rm):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out, summary = trained_rm
    model = AutoModelForSequenceClassification.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.num_labels == 1 and model.config.pad_token_id == tok.pad_token_id
    ours, _, meta = load_reward_model(out)
    assert meta["prompt_format"] == "raw"
    pairs = load_pairs(out / "pairs_heldout.jsonl")[:16]
    enc = TextEncoder(tok, "raw")
    seqs = [enc(p.prompt, p.chosen) for p in pairs]
    with torch.no_grad():
        hf = model(*pad_batch(seqs, tok.pad_token_id)).logits.squeeze(-1)
        mine = sequence_scores(ours, *pad_batch(seqs, tok.pad_token_id, "left"))
    torch.testing.assert_close(hf, mine, rtol=0, atol=1e-5)


def test_rm_config_errors_are_clear(tmp_path):
    with pytest.raises(ConfigError, match="heldout_frac must be in"):
        load_config(RMConfig, None, ["heldout_frac=1.5"]).validate()
    with pytest.raises(ConfigError, match="device 'tpu': expected one of auto, cpu, cuda"):
        load_config(RMConfig, None, ["device=tpu"]).validate()
    path = tmp_path / "p.jsonl"
    write_pairs([Pair(f"{i}+1=", f"#{i + 1}", "#0") for i in range(4)], path)
    cfg = load_config(RMConfig, None, [f"pairs={path}", "use_margin=true", "trunk=nowhere"])
    with pytest.raises(ConfigError, match="some training pairs have no 'margin'"):
        run_rm(cfg, progress=False)


# ---------------------------------------------------------------- RL against it
TINY = ["steps=2", "rollout.batch_size=8", "rollout.max_new_tokens=8", "rollout.pool_size=16",
        "log.eval_per_tier=2", "log.eval_max_new_tokens=4", "log.tensorboard=false",
        "log.policy_kl_every=1", "log.checkpoint_every=1"]


@pytest.mark.parametrize("preset, extra", [("ppo_clip", ["reward.normalize=true"]),
                                           ("grpo", ["rollout.group_size=4"])])
def test_rl_steps_against_a_frozen_reward_model(trained_rm, tiny_policy_dir, tmp_path, preset,
                                                extra):
    from lmpo.trainer.loop import train
    from lmpo.trainer.train_config import TrainConfig

    out, _ = trained_rm
    cfg = load_config(TrainConfig, preset,
                      [f"policy={tiny_policy_dir}", f"reward.model={out}", *TINY, *extra])
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert {"reward/rm_mean", "reward/checker_mean", "reward/accuracy"} <= set(r)
        if "reward.normalize=true" in extra:  # the reward is the normalised RM score
            assert r["reward/rm_running_std"] > 0
            assert r["reward/mean"] != pytest.approx(r["reward/rm_mean"])
        else:
            assert r["reward/mean"] == pytest.approx(r["reward/rm_mean"], rel=1e-5)
    from lmpo.trainer.checkpoint import latest_checkpoint, load_checkpoint

    state = load_checkpoint(latest_checkpoint(tmp_path / "run"))
    assert (state["reward_norm"] is not None) == ("reward.normalize=true" in extra)


def test_reward_model_config_errors(tiny_policy_dir, tmp_path):
    from lmpo.trainer.train_config import TrainConfig

    with pytest.raises(ConfigError, match="reward.normalize applies only with reward.model"):
        load_config(TrainConfig, "grpo", ["reward.normalize=true"])
    cfg = load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}",
                                            "reward.model=no-such-rm", *TINY])
    from lmpo.trainer.loop import train

    with pytest.raises(ConfigError, match="neither a Hugging Face folder.*rm presets: "
                                          "nano-chain-sum-rm"):
        train(cfg, tmp_path / "run", progress=False)
