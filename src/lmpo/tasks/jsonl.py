"""User datasets: JSONL (one object per line), parquet, or a local Hugging Face `datasets`
folder (`save_to_disk`), each row with `prompt`, `answer` and an optional `cluster`; verl's
schema (a chat `prompt`, `reward_model.ground_truth`, `extra_info.tier`) also reads. A
malformed row raises `DataError` naming `file:line` (JSONL) or `file:row` (1-based)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from lmpo.errors import DataError, UnknownName
from lmpo.tasks.base import ANSWER_MARK, Problem, extract_answer

REQUIRED = ("prompt", "answer")


def jsonl_objects(path: str | Path, required: tuple[str, ...]):
    """(`file:line`, object) for every non-blank line of a JSONL file; a line that is not
    a JSON object with the `required` fields raises `DataError` naming `file:line`."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise DataError(f"{where}: expected a JSON object, got {type(obj).__name__}")
            missing = [k for k in required if k not in obj]
            if missing:
                raise DataError(f"{where}: missing required field(s) {missing}")
            yield where, obj


def is_dataset_path(name: str) -> bool:
    """A user dataset: a .jsonl or .parquet file, or a `datasets` folder from save_to_disk."""
    path = Path(name)
    return name.endswith((".jsonl", ".parquet")) or (path.is_dir() and (
        (path / "dataset_info.json").exists() or (path / "state.json").exists()))


def verl_fields(obj: dict) -> dict:
    """A verl row (chat prompt, reward_model.ground_truth, extra_info.tier) as lmpo's fields."""
    out = dict(obj)
    prompt = obj.get("prompt")
    if isinstance(prompt, list | tuple) and prompt and isinstance(prompt[-1], dict):
        users = [m for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        out["prompt"] = (users or list(prompt))[-1].get("content")
    reward_model = obj.get("reward_model")
    if "answer" not in obj and isinstance(reward_model, dict) and "ground_truth" in reward_model:
        out["answer"] = reward_model["ground_truth"]
    extra = obj.get("extra_info")
    if "cluster" not in obj and isinstance(extra, dict) and extra.get("tier") is not None:
        out["cluster"] = extra["tier"]
    return out


def table_objects(path: str | Path, required: tuple[str, ...]):
    """(`file:row`, object) for every row of a parquet file or a `datasets` folder, read
    through the `datasets` library (no network: local files only)."""
    import datasets

    path = Path(path)
    try:
        table = datasets.load_from_disk(str(path)) if path.is_dir() else \
            datasets.Dataset.from_parquet(str(path))
    except Exception as exc:  # noqa: BLE001 - any reader failure is the file's
        raise DataError(f"{path}: cannot read as a dataset ({exc})") from None
    if isinstance(table, datasets.DatasetDict):
        raise DataError(f"{path}: a DatasetDict ({', '.join(table)}): point at one split's folder")
    for row, obj in enumerate(table, start=1):
        where = f"{path}:{row}"
        obj = verl_fields(obj)
        missing = [k for k in required if obj.get(k) is None]
        if missing:
            raise DataError(f"{where}: missing required field(s) {missing}")
        yield where, obj


def load_jsonl(path: str | Path) -> list[Problem]:
    """Every line (or row) becomes a Problem; any malformed line raises `DataError` naming
    `file:line` (`file:row` for parquet and `datasets` folders). Blank lines are the only
    lines skipped."""
    problems = []
    rows = jsonl_objects(path, REQUIRED) if str(path).endswith(".jsonl") \
        else table_objects(path, REQUIRED)
    for where, obj in rows:
        for key in ("prompt", "answer", "cluster"):
            if key in obj and not isinstance(obj[key], str | int | float):
                raise DataError(f"{where}: field {key!r} must be a string or number")
        problems.append(Problem(prompt=str(obj["prompt"]), answer=str(obj["answer"]).strip(),
                                cluster=str(obj.get("cluster", "default")),
                                meta={"source": where}))
    if not problems:
        raise DataError(f"{path}: no problems (the file is empty)")
    return problems


class JsonlTask:
    """A fixed dataset. Completions are scored 1 if the text after the last `#`
    (or, with no `#`, the whole stripped completion) equals the answer."""

    def __init__(self, path: str | Path):
        self.problems = load_jsonl(path)
        self.name = Path(path).stem  # file.jsonl, file.parquet or a datasets folder
        self.clusters = list(dict.fromkeys(p.cluster for p in self.problems))

    def sample(self, n: int, rng: random.Random, cluster: str | None = None) -> list[Problem]:
        pool = [p for p in self.problems if cluster is None or p.cluster == cluster]
        if not pool:
            raise UnknownName(f"no problems in cluster {cluster!r}; clusters: {self.clusters}")
        return [rng.choice(pool) for _ in range(n)]

    def solution(self, problem: Problem) -> str:
        return ANSWER_MARK + problem.answer

    def score(self, problem: Problem, completion: str) -> float:
        return float(self.is_correct(problem, completion))

    def is_correct(self, problem: Problem, completion: str) -> bool:
        answer = extract_answer(completion)
        if answer is None:
            answer = completion.strip()
        return answer == problem.answer
