"""User datasets beyond JSONL: parquet files (lmpo's columns or verl's schema, e.g. what
`lmpo export-data` writes) and local Hugging Face `datasets` folders, with file:row errors."""

from __future__ import annotations

import random

import datasets
import pytest

from lmpo.cli import main
from lmpo.errors import DataError
from lmpo.tasks import get_task

ROWS = {"prompt": ["1+1=", "2+3=", "9-4="], "answer": ["2", "5", "5"],
        "cluster": ["easy", "easy", "hard"]}


def test_a_parquet_file_with_prompt_and_answer(tmp_path):
    path = tmp_path / "mine.parquet"
    datasets.Dataset.from_dict(ROWS).to_parquet(str(path))
    task = get_task(str(path))
    assert task.clusters == ["easy", "hard"]
    problems = task.sample(20, random.Random(0), cluster="hard")
    assert {p.prompt for p in problems} == {"9-4="}
    assert task.is_correct(problems[0], "#5") and not task.is_correct(problems[0], "#6")


def test_a_datasets_folder(tmp_path):
    path = tmp_path / "folder"
    datasets.Dataset.from_dict(ROWS).save_to_disk(str(path))
    assert sorted(p.prompt for p in get_task(str(path)).problems) == sorted(ROWS["prompt"])


def test_verls_schema_reads_as_written_by_export_data(tmp_path):
    out = tmp_path / "verl"
    assert main(["export-data", "--config", "grpo", "--out", str(out), "rollout.pool_size=16",
                 "log.eval_per_tier=2"]) == 0
    task = get_task(str(out / "test.parquet"))
    exported = datasets.Dataset.from_parquet(str(out / "test.parquet"))
    assert [p.prompt for p in task.problems] == [r["extra_info"]["prompt"] for r in exported]
    assert [p.answer for p in task.problems] == [r["reward_model"]["ground_truth"]
                                                 for r in exported]
    assert task.clusters == list(dict.fromkeys(r["extra_info"]["tier"] for r in exported))


def test_a_row_without_an_answer_is_named_by_file_and_row(tmp_path):
    path = tmp_path / "bad.parquet"
    datasets.Dataset.from_dict({"prompt": ["1+1=", "2+2="], "answer": ["2", None]}).to_parquet(
        str(path))
    missing = r"bad\.parquet:2: missing required field\(s\) \['answer'\]"
    with pytest.raises(DataError, match=missing):
        get_task(str(path))
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="cannot read as a dataset"):
        get_task(str(tmp_path / "junk.parquet"))
