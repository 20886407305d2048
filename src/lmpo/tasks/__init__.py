"""Verifiable tasks: reasoning-gym arithmetic tiers, user JSONL data, curriculum samplers."""

from lmpo.tasks.base import ANSWER_MARK, Problem, Task, extract_answer
from lmpo.tasks.curriculum import KINDS as SAMPLER_KINDS
from lmpo.tasks.curriculum import Sampler
from lmpo.tasks.gym import TASKS, GymArithmeticTask, get_task
from lmpo.tasks.jsonl import DataError, JsonlTask, load_jsonl

__all__ = [
    "ANSWER_MARK", "SAMPLER_KINDS", "TASKS", "DataError", "GymArithmeticTask", "JsonlTask",
    "Problem", "Sampler", "Task", "extract_answer", "get_task", "load_jsonl",
]
