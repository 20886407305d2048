"""An lmpo task as verl data: parquet files in verl's schema and a reward function file.

    lmpo export-data --config grpo --out data/chain_sum
    # -> data/chain_sum/train.parquet, test.parquet, reward.py
    python -m verl.trainer.main_ppo data.train_files=data/chain_sum/train.parquet \\
        data.val_files=data/chain_sum/test.parquet \\
        reward.custom_reward_function.path=data/chain_sum/reward.py \
        reward.custom_reward_function.name=compute_score

`train.parquet` holds the run's RL training pool (`rollout.pool_size` problems over
`rollout.clusters`, drawn with the config's seed outside the held-out set) and
`test.parquet` the held-out problems lmpo evaluates (`log.eval_per_tier` per tier, the
same for every seed). Each row: `data_source` ("lmpo/<task>"), `prompt` (one chat user
turn, after an optional system turn), `ability`, `reward_model` ({style: rule,
ground_truth: the gold answer}) and `extra_info` (split, index, tier, the raw prompt and the
problem's metadata as JSON, which task checkers such as reasoning-gym's need).
`reward.py` defines `compute_score(data_source, solution_str, ground_truth, extra_info,
**kwargs)`, the signature verl's reward managers call (extra_info gains verl's own keys,
e.g. num_turns), scoring with the task's own checker: {"score": its reward, which may
give partial credit, "acc": exact correctness} (`lmpo` must be importable where verl runs).
"""

from __future__ import annotations

import json
from pathlib import Path

from lmpo.errors import ConfigError
from lmpo.tasks import get_task
from lmpo.tasks.base import Problem
from lmpo.tasks.heldout import heldout_split

REWARD_FILE = '''"""verl custom reward for the lmpo task {task!r} (written by `lmpo export-data`).

reward.custom_reward_function.path=<this file> reward.custom_reward_function.name=compute_score
"""

from lmpo.integrations.verl_data import score_completion

TASK = {task!r}
TASK_PARAMS = {params!r}
SCALE = {scale!r}  # lmpo's reward.scale: none, or pm1 ({{0, 1}} -> {{-1, +1}})


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """{{"score": the task's reward, "acc": exact correctness}} (verl logs both)."""
    return score_completion(TASK, TASK_PARAMS, solution_str, ground_truth, extra_info,
                            scale=SCALE)
'''

_TASKS: dict = {}


def _task(name: str, params: dict | None):
    key = (name, json.dumps(params or {}, sort_keys=True))
    if key not in _TASKS:
        _TASKS[key] = get_task(name, params or None)
    return _TASKS[key]


def score_completion(task: str, params: dict | None, completion: str, ground_truth: str,
                     extra_info: dict | None, *, scale: str = "none") -> dict:
    """{"score": the task's reward for `completion` of the problem a verl row describes (as
    lmpo's `reward.fn: task` scores it, mapped by `reward.scale`), "acc": its exact
    correctness} (verl's reward managers take "score" as the reward, log the rest)."""
    info = dict(extra_info or {})
    if "prompt" not in info:
        raise ValueError("extra_info has no 'prompt': was this row written by `lmpo "
                         "export-data`?")
    problem = Problem(prompt=info["prompt"], answer=str(ground_truth),
                      cluster=info.get("tier", "default"),
                      meta=json.loads(info.get("meta") or "{}"))
    task_ = _task(task, params)
    score = float(task_.score(problem, completion))
    return {"score": 2.0 * score - 1.0 if scale == "pm1" else score,
            "acc": float(task_.is_correct(problem, completion))}


def verl_row(task: str, problem: Problem, split: str, index: int,
             system_prompt: str | None) -> dict:
    messages = ([{"role": "system", "content": system_prompt}] if system_prompt else []) \
        + [{"role": "user", "content": problem.prompt}]
    return {"data_source": f"lmpo/{task}", "prompt": messages, "ability": "reasoning",
            "reward_model": {"style": "rule", "ground_truth": problem.answer},
            "extra_info": {"split": split, "index": index, "tier": problem.cluster,
                           "prompt": problem.prompt,
                           "meta": json.dumps(problem.meta, sort_keys=True, default=str)}}


def export_verl_data(cfg, out: str | Path, *, system_prompt: str | None = None) -> dict:
    """Write train.parquet, test.parquet and reward.py for `cfg`'s task; returns counts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lmpo.trainer.setup import training_pool

    if cfg.reward.fn != "task" or cfg.reward.model:
        raise ConfigError(f"export-data writes the task's own reward (reward.fn: task), not "
                          f"reward.fn={cfg.reward.fn!r}"
                          + (f" / reward.model={cfg.reward.model!r}" if cfg.reward.model else ""))
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: choose a new --out (nothing is overwritten)")
    task = get_task(cfg.task, cfg.task_params or None)
    heldout = heldout_split(task, cfg.log.eval_per_tier)
    splits = {"train": training_pool(task, cfg, heldout.prompts), "test": heldout.problems}
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, problems in splits.items():
        rows = [verl_row(cfg.task, p, split, i, system_prompt) for i, p in enumerate(problems)]
        pq.write_table(pa.Table.from_pylist(rows), out / f"{split}.parquet")
        counts[split] = len(rows)
    (out / "reward.py").write_text(REWARD_FILE.format(
        task=cfg.task, params=dict(cfg.task_params or {}), scale=cfg.reward.scale))
    return counts
