"""Bradley-Terry reward models: the loss, sequence scoring, and RL against a frozen one.

A reward model is a Hugging Face sequence-classification folder (`num_labels=1`): a
causal-LM trunk with a scalar head read at the last real token, as TRL's
`RewardTrainer` and OpenRLHF train it. lmpo writes `lmpo_rm.json` beside it (the
prompt format it was trained with, so RL scores exactly what it was trained on).

Scoring reads the head at each row's last attended token with position ids counted
from the attention mask, so a score does not depend on padding side or on which
other sequences share the batch. A scored text is the prompt (in the RM's prompt
format), the completion, then EOS.

`reward.model: DIR` (or the name of an `rm` preset, trained once and cached like a
warm-start policy) wraps the task's checker: the RM's score is the reward, the
checker still decides accuracy, and both means are logged (`reward/rm_mean`,
`reward/checker_mean`), so over-optimisation shows as the two diverging.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from lmpo.errors import ConfigError
from lmpo.models import PromptEncoder
from lmpo.welford import Welford

META_FILE = "lmpo_rm.json"


def bt_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | None = None,
            center_coef: float | None = None) -> torch.Tensor:
    """-log sigmoid(r_c - r_r [- margin]), mean over pairs, plus TRL's centring term
    center_coef * mean((r_c + r_r)^2) when given."""
    diff = chosen - rejected
    if margin is not None:
        diff = diff - margin
    loss = -F.logsigmoid(diff).mean()
    if center_coef:
        loss = loss + center_coef * (chosen + rejected).square().mean()
    return loss


def sequence_scores(model, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B] scalar scores of a sequence-classification model at each row's last attended
    token; either padding side gives the same values."""
    b, t = ids.shape
    positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
    trunk = getattr(model, model.base_model_prefix)
    hidden = trunk(input_ids=ids, attention_mask=mask, position_ids=positions).last_hidden_state
    last = (mask.long() * torch.arange(t, device=ids.device)).argmax(-1)
    return model.score(hidden[torch.arange(b, device=ids.device), last]).squeeze(-1).float()


class TextEncoder:
    """prompt (in the RM's format) + completion + EOS -> token ids."""

    def __init__(self, tokenizer, prompt_format: str = "auto", system_prompt: str | None = None):
        self.tokenizer = tokenizer
        self.prompt = PromptEncoder(tokenizer, prompt_format, system_prompt)
        if tokenizer.eos_token_id is None:
            raise ConfigError("the reward model's tokenizer has no EOS token")

    def __call__(self, prompt: str, completion: str) -> list[int]:
        return (self.prompt(prompt) + self.tokenizer.encode(completion, add_special_tokens=False)
                + [self.tokenizer.eos_token_id])


def pad_batch(seqs: list[list[int]], pad_id: int, side: str = "right"
              ) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        cols = slice(0, len(s)) if side == "right" else slice(width - len(s), width)
        ids[i, cols], mask[i, cols] = torch.tensor(s, dtype=torch.long), 1
    return ids, mask


@torch.no_grad()
def score_batches(model, seqs: list[list[int]], pad_id: int, batch_size: int,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """[N] scores of token sequences, `batch_size` at a time, on the CPU."""
    out = []
    for i in range(0, len(seqs), batch_size):
        ids, mask = pad_batch(seqs[i:i + batch_size], pad_id)
        out.append(sequence_scores(model, ids.to(device), mask.to(device)).cpu())
    return torch.cat(out) if out else torch.zeros(0)


def load_reward_model(path: str | Path):
    """(model, tokenizer, meta) of a reward-model folder, in eval mode and frozen."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"reward model {str(path)!r} is not a Hugging Face folder (no "
                          "config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True)
    if model.config.num_labels != 1:
        raise ConfigError(f"reward model {path} has num_labels={model.config.num_labels}; a "
                          "Bradley-Terry reward model has 1")
    meta = json.loads((path / META_FILE).read_text()) if (path / META_FILE).is_file() else {}
    return model.eval().requires_grad_(False), tokenizer, meta


class RunningMoments(Welford):
    """EBPO's Welford accumulator over every training score, with the sample std (ddof 1)
    that running reward normalisation divides by; checkpointed with the run."""

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else 1.0

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        self.n, self.mean, self.m2 = (float(state[k]) for k in ("n", "mean", "m2"))


class ModelReward:
    """`Reward`'s interface with a frozen reward model as the score (see module docstring).

    `score(..., train=True)` (the rollout's call) updates the running moments and returns
    normalised scores when `normalize`; evaluation gets raw RM scores."""

    def __init__(self, path: str | Path, checker, *, micro_batch_size: int = 64,
                 normalize: bool = False, device: torch.device | str = "cpu"):
        self.model, self.tokenizer, self.meta = load_reward_model(path)
        self.model.to(device)
        self.device = torch.device(device)
        self.encode = TextEncoder(self.tokenizer, self.meta.get("prompt_format", "auto"),
                                  self.meta.get("system_prompt"))
        self.checker, self.micro = checker, micro_batch_size
        self.normalizer = RunningMoments() if normalize else None
        self.spec, self.task = f"reward model {path}", checker.task
        self._sums: dict[str, float] = {}

    def raw_scores(self, prompts: list[str], completions: list[str]) -> torch.Tensor:
        seqs = [self.encode(p, c) for p, c in zip(prompts, completions, strict=True)]
        return score_batches(self.model, seqs, self.tokenizer.pad_token_id, self.micro,
                             self.device)

    def score(self, problems, completions, *, where: str = "sample", index=None,
              train: bool = False) -> tuple[list[float], list[bool]]:
        checked, correct = self.checker.score(problems, completions, where=where, index=index)
        raw = self.raw_scores([p.prompt for p in problems], list(completions))
        if not torch.isfinite(raw).all():
            i = int((~torch.isfinite(raw)).nonzero()[0])
            raise ConfigError(f"the reward model scored {where} {i} non-finite "
                              f"({float(raw[i])}): prompt {problems[i].prompt!r}")
        scores = raw
        if train:
            known = [s for s in checked if s is not None]
            for key, value, n in (("rm", float(raw.sum()), len(raw)),
                                  ("checker", float(sum(known)), len(known))):
                self._sums[key] = self._sums.get(key, 0.0) + value
                self._sums[key + "_n"] = self._sums.get(key + "_n", 0.0) + n
            if self.normalizer is not None:
                self.normalizer.update(raw)
                scores = (raw - self.normalizer.mean) / (self.normalizer.std + 1e-8)
        return [float(s) for s in scores], list(correct)

    def pop_metrics(self) -> dict[str, float]:
        """reward/rm_mean (raw RM score) and reward/checker_mean over every training sample
        scored since the last call."""
        s, self._sums = self._sums, {}
        out = {}
        for key in ("rm", "checker"):
            if s.get(key + "_n"):
                out[f"reward/{key}_mean"] = s[key] / s[key + "_n"]
        if self.normalizer is not None:
            out |= {"reward/rm_running_mean": self.normalizer.mean,
                    "reward/rm_running_std": self.normalizer.std}
        return out
