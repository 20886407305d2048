"""User datasets from JSONL: one object per line with `prompt`, `answer`, optional `cluster`."""

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


def load_jsonl(path: str | Path) -> list[Problem]:
    """Every line becomes a Problem; any malformed line raises `DataError` naming
    `file:line`. Blank lines are the only lines skipped."""
    problems = []
    for where, obj in jsonl_objects(path, REQUIRED):
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
        self.name = Path(path).stem
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
