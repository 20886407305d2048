"""The papers' settings as options: rewards in {-1, +1}, a random critic head, ESPO's
unclipped regret and its failure reward, NLL on correct responses (tests/test_corrections.py
has its gradient), dual clip on every ratio-clipped loss."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from lmpo.config import ConfigError, load_config
from lmpo.losses import list_losses, loss_hparams, loss_meta
from lmpo.rewards import build_reward, reward_range
from lmpo.rollout import ESPO, build_controller
from lmpo.rollout.controllers.base import BelowFailure
from lmpo.tasks import get_task
from lmpo.trainer.parts import build_controller_of
from lmpo.trainer.train_config import RewardConfig, TrainConfig


def test_pm1_maps_scores_after_accuracy_is_decided():
    task = get_task("chain_sum")
    p = task.sample(1, __import__("random").Random(0))[0]
    right, wrong = task.solution(p), "1,2#nonsense"
    for scale, want in (("none", [1.0, 0.0]), ("pm1", [1.0, -1.0])):
        scores, correct = build_reward("task", task, scale).score([p, p], [right, wrong])
        assert scores == want and correct == [True, False]
    assert reward_range(RewardConfig(scale="pm1")) == (-1.0, 1.0, -1.0)
    assert reward_range(RewardConfig()) == (0.0, 1.0, 0.0)
    assert reward_range(RewardConfig(fn="x.py:f")) == (None, None, None)


def test_a_pm1_run_scores_failures_minus_one(tiny_policy_dir, tmp_path):
    import json

    from lmpo.trainer.loop import train

    cfg = load_config(TrainConfig, "grpo", [*cfg_args(tiny_policy_dir), "reward.scale=pm1"])
    train(cfg, tmp_path / "run", progress=False)
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["reward/min"] == -1.0 and row["reward/accuracy"] == 0.0  # a random policy


@pytest.mark.parametrize("init", ["zero", "random"])
def test_the_critic_head_starts_as_asked_without_touching_other_randomness(tiny_policy_dir,
                                                                           init):
    from lmpo.models import ValueModel, load_policy

    policy, _ = load_policy(tiny_policy_dir)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = ValueModel.from_policy(policy, init=init, seed=7)
    if init == "zero":
        assert not a.head.weight.any() and not a.head.bias.any()
        return  # (the zero head keeps its old construction, global RNG included)
    assert torch.equal(torch.get_rng_state(), before)  # drawn from its own seed
    b = ValueModel.from_policy(policy, init=init, seed=7)
    c = ValueModel.from_policy(policy, init=init, seed=8)
    assert torch.equal(a.head.weight, b.head.weight) and a.head.weight.abs().sum() > 0
    assert not torch.equal(a.head.weight, c.head.weight)
    bound = 1 / math.sqrt(policy.config.hidden_size)  # nn.Linear's default: U(-b, b)
    assert a.head.weight.abs().max() <= bound


def test_espo_regret_is_unclipped_unless_asked():
    def z_after(**kw):
        e = ESPO(warmup=False, alpha_s=0.0, **kw)
        e.begin_batch(1)
        e.end_batch(torch.tensor([[0.0, 2.0]]), torch.tensor([2]))  # first batch: mu 1, var 1
        e.begin_batch(1)
        e.step(torch.arange(1), torch.tensor([50.0]), torch.tensor([1.0]), 0)
        return float(e._z[0])

    free = z_after()
    assert free == pytest.approx((50 - 1) / math.sqrt(1 + 1e-8))  # as the seed writes it
    assert z_after(clip=5.0) == pytest.approx(5.0)


def test_a_stop_scores_a_failures_reward_by_default():
    assert build_controller("espo").stop_score == 0.0
    assert build_controller("random_stop", {"savings": 0.2}).stop_score == 0.0
    assert build_controller("espo", failure_reward=-1.0,
                            reward_range=(-1.0, 1.0)).stop_score == -1.0
    below = build_controller("espo", {"r_fail": -1.0})
    assert below.stop_score == -1.0 and below.notes == [
        "controller.hparams.r_fail=-1.0 is below a failure's reward 0.0 (rewards span "
        "[0.0, 1.0]): a stopped response is penalised beyond failing"]
    assert build_controller("espo", {"r_fail": 0.0}).notes == []  # a failure's own reward
    with pytest.raises(ValueError, match="declares no failure reward; set "
                                         "controller.hparams.r_fail"):
        build_controller("espo", failure_reward=None, reward_range=(None, None))


def test_a_run_warns_when_a_stop_costs_more_than_failing(tiny_policy_dir, tmp_path):
    from lmpo.trainer.loop import train

    # the preset keeps the first edition's r_fail = -1
    cfg = load_config(TrainConfig, "espo", cfg_args(tiny_policy_dir))
    with pytest.warns(BelowFailure, match="r_fail=-1.0 is below a failure's reward 0.0"):
        train(cfg, tmp_path / "run", progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BelowFailure)
        train(load_config(TrainConfig, "espo", [*cfg_args(tiny_policy_dir),
                                                "controller.hparams.r_fail=0.0"]),
              tmp_path / "quiet", progress=False)


def cfg_args(policy):
    return [f"policy={policy}", "steps=1", "rollout.batch_size=8", "rollout.group_size=4",
            "rollout.max_new_tokens=4", "log.eval_per_tier=2", "log.eval_max_new_tokens=2",
            "log.tensorboard=false"]


def test_the_run_gives_espo_its_rewards_failure_value(tiny_policy_dir, tmp_path):
    cfg = load_config(TrainConfig, "espo", [f"policy={tiny_policy_dir}", "reward.scale=pm1",
                                            "controller={name: espo, hparams: {beta: 0.5}}"])
    assert build_controller_of(cfg).stop_score == -1.0
    fn = tmp_path / "mine.py"
    fn.write_text("def f(prompts, completions, answers, **kw):\n"
                  "    return [0.0] * len(prompts)\n")
    with pytest.raises(ConfigError, match="declares no failure reward"):
        load_config(TrainConfig, "espo", [f"policy={tiny_policy_dir}", f"reward.fn={fn}:f",
                                          "controller={name: espo, hparams: {beta: 0.5}}"])


def test_every_clipped_loss_declares_its_dual_clip():
    """A loss with a ratio clip (eps_low/eps_high) declares `dual_clip` (registry metadata):
    "offered" (PPO's dual clip, clip_ratio_c, off by default), "peer" (its engine's form
    has none: TRL's bnpo and luspo, verl's clip_cov and geo_mean) or "bounded" (a
    stop-gradient weight the clip already bounds: CISPO, rollout_is). A new clipped loss
    that declares nothing fails here, naming itself."""
    clipped = [n for n in list_losses() if "eps_low" in loss_hparams(n)]
    undeclared = [n for n in clipped if loss_meta(n)["dual_clip"] not in
                  ("offered", "peer", "bounded")]
    assert not undeclared, f"declare dual_clip= in the registration of {undeclared}"
    offered = [n for n in clipped if loss_meta(n)["dual_clip"] == "offered"]
    assert {"ppo_clip", "cegppo", "gspo"} <= set(offered)
    for name in offered:
        assert loss_hparams(name)["clip_ratio_c"] is None
    for name in set(clipped) - set(offered):
        assert "clip_ratio_c" not in loss_hparams(name), name
