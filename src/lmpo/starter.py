"""`lmpo init NAME`: a starter comparison in the folder NAME, the tutorial's three files
ready to edit (docs/tutorial.md):

    NAME/experiment.yaml   CE-GPPO vs GRPO: arms, seeds, steps, claims
    NAME/smoke.yaml        the same made small: a run that checks the setup in a minute
    NAME/reward.py         a reward function with TRL's signature
    NAME/data/train.jsonl  problems with answers and two clusters (easy, hard)

It starts from the testbed's warm-started policy (`nano-chain-sum`, built locally on first
use) on chain-sum problems in that policy's format, so the smoke run works as written on
any machine; replace `policy`, the data and the reward with yours. An existing folder is
never overwritten.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from lmpo.errors import ConfigError

EXPERIMENT = """\
# CE-GPPO vs GRPO on {name}'s problems and reward (lmpo init; docs/tutorial.md explains
# every key). Replace policy with your model: a local Hugging Face folder, or
# smollm2-135m-instruct (the packaged SmolLM2); data/train.jsonl with your problems
# ({{"prompt", "answer", optional "cluster"}}); reward.py with your score.
base:
  policy: nano-chain-sum
  task: data/train.jsonl
  reward: {{fn: reward.py:score}}
  rollout: {{batch_size: 32, group_size: 8, max_new_tokens: 16, clusters: [hard]}}
  log: {{eval_every: 100, eval_per_tier: 50, eval_max_new_tokens: 16, eval_temperature: 1.0,
        eval_samples: 4}}
arms:
  cegppo: {{preset: cegppo}}
  grpo: {{preset: grpo}}
seeds: 5
steps: 200
differs_in: [loss.name, loss.hparams, loss.agg]
claims:
  - kind: direction
    metric: eval/accuracy_trained
    arms: [cegppo, grpo]
    expect: greater
    primary: true
    min_effect: 0.02
    sentence: "CE-GPPO ends more accurate than GRPO on the held-out hard problems"
  - kind: direction
    metric: policy/entropy
    reduce: last_k
    k: 20
    arms: [cegppo, grpo]
    expect: greater
    min_effect: 0.01
    sentence: "CE-GPPO keeps more entropy than GRPO"
"""

SMOKE = """\
# experiment.yaml made small: a smoke run that checks the model, data, reward and settings
# work together, not a comparison (at 2 seeds every claim reads "insufficient seeds").
#   lmpo compare --config smoke.yaml --out runs/smoke && lmpo report runs/smoke
extends: experiment.yaml
base:
  rollout: {batch_size: 8, group_size: 4}
  log: {eval_per_tier: 8, eval_samples: 1}
seeds: 2
steps: 3
warm_starts: shared  # one warm start for both seeds (the comparison draws one per seed)
"""

REWARD = '''\
"""The reward: a batch at a time, TRL's signature. A score >= 1 counts as correct."""

import re


def score(prompts, completions, answers, **meta):
    """1 for the right final number, 0.1 for a wrong number, 0 for no number."""
    scores = []
    for completion, answer in zip(completions, answers):
        numbers = re.findall(r"-?\\d+", completion)
        scores.append(0.0 if not numbers else 1.0 if numbers[-1] == answer else 0.1)
    return scores
'''

CLUSTERS = {"easy": "t2d1", "hard": "t3d1"}  # chain-sum tiers, in the warm start's format
PER_CLUSTER = 400


def data_lines(seed: int = 0) -> list[str]:
    from lmpo.tasks import get_task

    task, rng = get_task("chain_sum"), random.Random(seed)
    lines = []
    for cluster, tier in CLUSTERS.items():
        seen = set()
        for p in task.sample(PER_CLUSTER, rng, cluster=tier):
            if p.prompt not in seen:
                seen.add(p.prompt)
                lines.append(json.dumps({"prompt": p.prompt, "answer": p.answer,
                                         "cluster": cluster}))
    return lines


def init(name: str) -> Path:
    """Write the starter into the new folder `name`; returns it."""
    root = Path(name)
    if root.exists():
        raise ConfigError(f"{root} already exists: lmpo init writes a new folder only")
    (root / "data").mkdir(parents=True)
    (root / "experiment.yaml").write_text(EXPERIMENT.format(name=root.name))
    (root / "smoke.yaml").write_text(SMOKE)
    (root / "reward.py").write_text(REWARD)
    (root / "data" / "train.jsonl").write_text("\n".join(data_lines()) + "\n")
    return root
