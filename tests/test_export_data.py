"""`lmpo export-data`: an lmpo task as verl data (parquet in verl's schema, a reward file)."""

from __future__ import annotations

import importlib.util
import json

import pyarrow.parquet as pq
import pytest

from lmpo.cli import main
from lmpo.config import load_config
from lmpo.tasks import get_task
from lmpo.tasks.heldout import heldout_split
from lmpo.trainer.train_config import TrainConfig


def load_reward(path):
    spec = importlib.util.spec_from_file_location("lmpo_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.compute_score


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "chain_sum"
    assert main(["export-data", "--config", "grpo", "--out", str(out), "rollout.pool_size=64",
                 "log.eval_per_tier=10", "--system-prompt", "Be brief."]) == 0
    return out


def test_rows_have_verls_schema_and_the_held_out_set_is_lmpos(exported):
    train = pq.read_table(exported / "train.parquet").to_pylist()
    test = pq.read_table(exported / "test.parquet").to_pylist()
    assert len(train) == 64
    for row in train + test:
        assert set(row) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        assert row["data_source"] == "lmpo/chain_sum"
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        assert row["prompt"][1]["content"] == row["extra_info"]["prompt"]
        assert row["reward_model"]["style"] == "rule"
    cfg = load_config(TrainConfig, "grpo", ["log.eval_per_tier=10"])
    held = heldout_split(get_task(cfg.task), 10)
    assert [r["extra_info"]["prompt"] for r in test] == [p.prompt for p in held.problems]
    assert [r["reward_model"]["ground_truth"] for r in test] == [p.answer for p in held.problems]
    assert {r["extra_info"]["tier"] for r in train} == {"t3d1"}  # the config's clusters
    assert not {r["extra_info"]["prompt"] for r in train} & held.prompts


def test_the_reward_file_scores_as_verl_calls_it(exported):
    compute_score = load_reward(exported / "reward.py")
    task = get_task("chain_sum")
    rows = pq.read_table(exported / "test.parquet").to_pylist()[:20]
    for row in rows:
        gold = row["reward_model"]["ground_truth"]
        extra = dict(row["extra_info"], num_turns=None, rollout_reward_scores={})  # verl adds
        right = compute_score(data_source=row["data_source"], solution_str=f"#{gold}",
                              ground_truth=gold, extra_info=extra)
        wrong = compute_score(data_source=row["data_source"], solution_str="#x",
                              ground_truth=gold, extra_info=extra)
        assert right == {"score": 1.0, "acc": 1.0} and wrong == {"score": 0.0, "acc": 0.0}
        problem = next(p for p in heldout_split(task, 10).problems
                       if p.prompt == row["extra_info"]["prompt"])
        partial = compute_score(data_source=row["data_source"], solution_str=f"#{gold}1",
                                ground_truth=gold, extra_info=extra)
        assert partial == {"score": task.score(problem, f"#{gold}1"),  # the task's reward
                           "acc": 0.0}
        assert json.loads(extra["meta"]) == json.loads(json.dumps(problem.meta, default=str))


def test_the_configs_reward_scale_and_an_unexportable_reward(tmp_path):
    assert main(["export-data", "--config", "grpo", "--out", str(tmp_path / "pm1"),
                 "reward.scale=pm1", "rollout.pool_size=8", "log.eval_per_tier=2"]) == 0
    compute_score = load_reward(tmp_path / "pm1" / "reward.py")
    row = pq.read_table(tmp_path / "pm1" / "test.parquet").to_pylist()[0]
    gold = row["reward_model"]["ground_truth"]
    assert compute_score(row["data_source"], "#x", gold, row["extra_info"])["score"] == -1.0
    assert main(["export-data", "--config", "grpo", "--out", str(tmp_path / "ex"),
                 "reward.fn=exact"]) != 0


def test_nothing_already_written_is_overwritten(exported, capsys):
    before = (exported / "reward.py").read_text()
    assert main(["export-data", "--config", "grpo", "--out", str(exported)]) != 0
    assert "not empty" in capsys.readouterr().err
    assert (exported / "reward.py").read_text() == before


def test_a_row_from_elsewhere_gets_a_clear_error(exported):
    compute_score = load_reward(exported / "reward.py")
    with pytest.raises(ValueError, match="written by `lmpo export-data`"):
        compute_score("x", "#1", "1", {})
