"""Several reward functions (reward.extra, GDPO) and ReMax's greedy baselines, end to end:
the scores and their annotations, what reaches the estimator, the greedy pass the trainer
runs and counts, and the errors for bad settings. The estimators' formulas are checked
against float64 references (tests/advantage_references/rollout_baselines.py), TRL's
normalize_then_sum (tests/test_trl.py) and verl's remax (tests/test_verl_peers.py)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lmpo.advantages import get_advantage
from lmpo.config import ConfigError, load_config
from lmpo.rewards import build_reward
from lmpo.rewards.multi import MultiReward, Score, score_parts
from lmpo.tasks import Problem
from lmpo.trainer.advantage import group_sequence_advantages
from lmpo.trainer.filters import Drawn
from lmpo.trainer.loop import train
from lmpo.trainer.stages import usable
from lmpo.trainer.train_config import TrainConfig
from tests.test_trainer import TINY


def write_fn(tmp_path, body: str, name="extra.py", fn="reward") -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"{path}:{fn}"


def problems(n):
    return [Problem(f"{i}+0=", str(i), "t") for i in range(n)]


def test_several_functions_sum_with_weights_and_the_checker_alone_decides_accuracy(tmp_path):
    spec = write_fn(tmp_path, """
def reward(prompts, completions, answers, **meta):
    return [None if c == "skip" else 2.0 * len(c) for c in completions]
""")
    multi = MultiReward([build_reward("last_number", None), build_reward("answer_format", None),
                         build_reward(spec, None)], [1.0, 0.5, -0.25])
    comps = ["# 0", "1", "skip", "# 3"]
    scores, correct = multi.score(problems(4), comps, train=True)
    # last_number: 1, 1, 0, 1; answer_format: 1, 0, 0, 1; user: 6, 2, None, 6
    want = [1 + 0.5 - 0.25 * 6, 1 + 0 - 0.25 * 2, 0.0, 1 + 0.5 - 0.25 * 6]
    assert [float(s) for s in scores] == pytest.approx(want, abs=1e-12)
    assert correct == [True, True, False, True]  # the checker's, not the format's
    assert scores[2].parts[:2] == (0.0, 0.0) and math.isnan(scores[2].parts[2])
    assert all(s.weights == (1.0, 0.5, -0.25) for s in scores)
    assert multi.pop_metrics() == pytest.approx({
        "reward/fn/last_number_mean": 0.75, "reward/fn/answer_format_mean": 0.5,
        "reward/fn/reward_mean": 14 / 3})
    assert multi.pop_metrics() == {}  # since the last call only


def test_a_sample_no_function_scores_is_dropped_and_one_function_alone_still_counts(tmp_path):
    none = write_fn(tmp_path, "def reward(p, c, a, **m):\n    return [None] * len(c)\n")
    multi = MultiReward([build_reward(none, None),
                         build_reward(write_fn(tmp_path, "def other(p, c, a, **m):\n"
                                                         "    return [None, 3.0]\n", "b.py",
                                               "other"), None)], [1.0, 2.0])
    scores, _ = multi.score(problems(2), ["a", "b"])
    assert scores[0] is None and float(scores[1]) == 6.0


def test_score_parts_reads_annotated_scores_and_plain_ones():
    a = Score.of(1.5, parts=[1.0, 1.0], weights=[1.0, 0.5])
    parts, weights = score_parts([a, 0.0])  # 0.0: a stopped response's score, say
    assert weights.tolist() == [1.0, 0.5]
    assert parts[0].tolist() == [1.0, 1.0]
    assert parts[1, 0] == 0.0 and math.isnan(parts[1, 1])
    parts, weights = score_parts([0.25, 1.0])  # one function: the scores themselves
    assert parts.tolist() == [[0.25], [1.0]] and weights.tolist() == [1.0]
    # annotations survive a second annotation (ReMax's baseline on a multi-reward score)
    b = Score.of(a, baseline=0.5)
    assert (b.parts, b.weights, b.baseline) == (a.parts, a.weights, 0.5)


def drawn_with(scores, group=2):
    from lmpo.rollout.types import Rollout

    n = len(scores)
    rollout = Rollout(prompt_ids=torch.ones(n, 2, dtype=torch.long), prompt_mask=torch.ones(n, 2),
                      response_ids=torch.ones(n, 3, dtype=torch.long),
                      response_mask=torch.ones(n, 3), logp=torch.zeros(n, 3),
                      regret=torch.zeros(n, 3), values=None, stop_reason=["eos"] * n,
                      num_generated=3 * n, lengths=torch.full((n,), 3))
    return Drawn(problems(n), rollout, list(scores), [False] * n, 0)


def test_the_estimators_get_parts_and_baselines_of_the_samples_that_take_part():
    w = [1.0, 0.5]
    scores = [Score.of(1.5, parts=[1, 1], weights=w, baseline=1.0), None,
              Score.of(0.5, parts=[0, 1], weights=w, baseline=1.0),
              Score.of(0.0, parts=[0, 0], weights=w, baseline=0.0)]
    scored = usable(drawn_with(scores), group=2)
    assert scored.parts.tolist() == [[1, 1], [0, 1], [0, 0]]
    assert scored.baselines.tolist() == [1.0, 1.0, 0.0]
    adv, _ = group_sequence_advantages(get_advantage("remax"), "remax", scored)
    assert adv.tolist() == [0.5, -0.5, 0.0]
    adv, _ = group_sequence_advantages(get_advantage("gdpo"), "gdpo", scored)
    direct, _ = get_advantage("gdpo")(scored.scores, scored.group_ids, parts=scored.parts,
                                      weights=torch.tensor(w))
    torch.testing.assert_close(adv, direct)
    plain = usable(drawn_with([1.0, 0.0]), group=2)
    assert plain.baselines is None
    with pytest.raises(ValueError, match="greedy baseline"):
        group_sequence_advantages(get_advantage("remax"), "remax", plain)


def tiny(policy_dir, preset, *extra):
    return load_config(TrainConfig, preset, [f"policy={policy_dir}", *TINY, *extra])


def test_a_remax_run_decodes_one_greedy_response_per_prompt_and_counts_its_tokens(
        tiny_policy_dir, tmp_path, monkeypatch):
    import lmpo.trainer.greedy as greedy
    import lmpo.trainer.stages as stages

    calls = {"greedy": [], "sampled": []}
    for module, key in ((greedy, "greedy"), (stages, "sampled")):
        def spy(model, prompts, _original=module.sample, _key=key, **kw):
            out = _original(model, prompts, **kw)
            calls[_key].append((len(prompts), kw["temperature"], out.num_generated))
            return out
        monkeypatch.setattr(module, "sample", spy)
    cfg = tiny(tiny_policy_dir, "remax", "steps=2", "rollout.group_size=4")
    train(cfg, tmp_path / "run", progress=False)
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # per step: 8 samples at the run's temperature, then 8 / G = 2 prompts greedily
    assert [(n, t) for n, t, _ in calls["greedy"]] == [(2, 0.0), (2, 0.0)]
    assert [(n, t) for n, t, _ in calls["sampled"]] == [(8, 1.0), (8, 1.0)]
    for row, g, s in zip(rows, calls["greedy"], calls["sampled"], strict=True):
        assert row["tokens/generated"] == g[2] + s[2] and g[2] >= 2
    calls["greedy"].clear()
    train(tiny(tiny_policy_dir, "grpo", "steps=1"), tmp_path / "grpo", progress=False)
    assert calls["greedy"] == []  # no estimator asks: no greedy pass


def test_a_gdpo_run_logs_every_function(tiny_policy_dir, tmp_path):
    cfg = tiny(tiny_policy_dir, "gdpo", "steps=1", "reward.weights=[1.0, 0.5]")
    train(cfg, tmp_path / "run", progress=False)
    (row,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    for key in ("reward/fn/task_mean", "reward/fn/answer_format_mean"):
        assert key in row and 0.0 <= row[key] <= 1.0
    assert row["reward/mean"] == pytest.approx(row["reward/fn/task_mean"]
                                               + 0.5 * row["reward/fn/answer_format_mean"])


@pytest.mark.parametrize("overrides, msg", [
    (["reward.extra=[answer_format]", "reward.weights=[1.0]"], "one per reward function"),
    (["reward.extra=[answer_format]", "reward.weights=[1.0, nope]"], "finite numbers"),
    (["reward.extra=[answer_fromat]"], "answer_format"),
    (["reward.fn=exact", "reward.extra=[exact]"], "distinct names"),
    (["reward.extra=[answer_format]", "reward.model=nano-chain-sum-rm"], "reward.extra sums"),
    (["advantage.name=remax", "reward.model=nano-chain-sum-rm", "reward.normalize=true"],
     "greedy baseline"),
])
def test_bad_multi_reward_and_remax_settings_fail_before_any_work(tiny_policy_dir, tmp_path,
                                                                  overrides, msg):
    from lmpo.trainer.validate import validate

    with pytest.raises(ConfigError, match=msg):
        validate(tiny(tiny_policy_dir, "grpo", *overrides))
