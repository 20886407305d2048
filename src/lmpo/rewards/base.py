"""`reward.fn`: which function turns completions into scores.

- `task` (default): the task's own `score` (partial credit allowed); accuracy is
  the task's `is_correct`.
- `exact`: the completion, stripped, equals the gold answer.
- `last_number`: the last number in the completion equals the gold number.
- `math_verify`: the `math-verify` package (gold and completion parsed, \\boxed{} first,
  then verified as mathematical equivalence), run in a guarded worker process.
- `answer_format`: a format reward, not a checker: 1 if the completion writes exactly one
  answer mark (`#`) and a single number after it, whatever the number.
- `path/to/file.py:function`: a user function with TRL's shape, called once per batch:
  `fn(prompts, completions, answers, **meta) -> list[float | None]`. `None` means "no
  score": the sample is dropped from the update (counted in `data/reward_none`).

Accuracy under a built-in checker is "scored 1"; under a user function it is
"scored >= 1" (docs/rewards.md). `reward.scale: pm1` maps every score s to 2s - 1 after
accuracy is decided ({0, 1} -> {-1, +1}).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path

from lmpo.choices import REWARD_SCALES
from lmpo.errors import ConfigError, LmpoError
from lmpo.reward_worker import (
    DEFAULT_TIMEOUT_S,
    RewardFailed,
    RewardTimeout,
    Unconvertible,
    UserFunctionWorker,
)
from lmpo.tasks.base import ANSWER_MARK

# the largest |reward| accepted: far above any score that normalisation, a critic or a
# float32 update can take (1e308 passes a finiteness check, then overflows)
MAX_ABS_REWARD = 1e6
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


class RewardError(LmpoError, RuntimeError):
    """A reward function raised or returned something unusable; names the sample."""


def _as_decimal(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").strip())
    except (InvalidOperation, ValueError):
        return None


def exact_match(completion: str, answer: str) -> float:
    return float(completion.strip() == answer.strip())


def last_number(completion: str, answer: str) -> float:
    """1 if the last number written in `completion` equals the gold number (commas,
    a sign and trailing decimals tolerated: '1,000.0' == '1000'), else 0."""
    found = NUMBER.findall(completion)
    gold = _as_decimal(answer)
    if not found or gold is None:
        return 0.0
    got = _as_decimal(found[-1].rstrip("."))
    return float(got is not None and got == gold)


def answer_format(completion: str, answer: str) -> float:
    """1 if `completion` has exactly one answer mark followed by one number (and nothing else
    on that line), else 0; the gold `answer` is not read."""
    if completion.count(ANSWER_MARK) != 1:
        return 0.0
    tail = completion.split(ANSWER_MARK, 1)[1].split("\n", 1)[0].strip()
    return float(NUMBER.fullmatch(tail) is not None)


def _per_sample(check: Callable[[str, str], float]):
    def batch_fn(prompts, completions, answers, **meta):
        return [check(c, a) for c, a in zip(completions, answers, strict=True)]
    batch_fn.__name__ = check.__name__
    return batch_fn


def _math_verify_fn():
    from lmpo.rewards.guarded import math_verify_batch

    return math_verify_batch


REWARD_FNS: dict[str, Callable[[], Callable]] = {
    "exact": lambda: _per_sample(exact_match),
    "last_number": lambda: _per_sample(last_number),
    "math_verify": _math_verify_fn,
    "answer_format": lambda: _per_sample(answer_format),
}
BUILTIN = ("task", *REWARD_FNS)
# the reward scales a config may name (lmpo.choices), in that order
SCALES = dict(zip(REWARD_SCALES, (lambda s: s, lambda s: 2.0 * s - 1.0), strict=True))


def reward_range(cfg) -> tuple[float | None, float | None, float | None]:
    """(lowest, highest, a failure's reward) of the run's reward (a RewardConfig): the
    built-in checkers and tasks score in [0, 1] with 0 for a failure (scaled as
    `reward.scale` says); a user function, a reward model or a sum of several functions
    (`reward.extra`) declares none (None)."""
    if cfg.model is not None or cfg.fn not in BUILTIN or getattr(cfg, "extra", None):
        return None, None, None
    low, high = (SCALES[cfg.scale](x) for x in (0.0, 1.0))
    return low, high, low


def load_user_fn(spec: str) -> Callable:
    """`path/to/file.py:function` -> the function (the file is imported once)."""
    from lmpo.user_modules import import_user_modules

    path, _, name = spec.rpartition(":")
    if not path.endswith(".py") or not name:
        raise ConfigError(f"reward.fn {spec!r}: expected one of {', '.join(BUILTIN)} or "
                          "path/to/file.py:function")
    (module,) = import_user_modules([path], what=f"reward.fn {spec!r}")
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"reward.fn {spec!r}: {path} has no function {name!r}")
    return fn


class Reward:
    """Scores a batch of completions; see the module docstring. A user function runs in
    a worker process, each call bounded by `timeout_s` (lmpo.reward_worker; None:
    in this process, unbounded); its file is imported here too, once, so that a missing
    function fails before any work."""

    def __init__(self, fn_spec: str, task, scale: str = "none",
                 timeout_s: float | None = DEFAULT_TIMEOUT_S):
        self.spec, self.task, self.scale = fn_spec, task, SCALES[scale]
        if fn_spec == "task":
            self.fn = None
        elif fn_spec in REWARD_FNS:
            self.fn = REWARD_FNS[fn_spec]()
        else:
            self.fn = load_user_fn(fn_spec)
            if timeout_s is not None:
                path, _, name = fn_spec.rpartition(":")
                self.fn = UserFunctionWorker(str(Path(path).expanduser().resolve()), name,
                                             timeout_s)
        self.binary = fn_spec in REWARD_FNS

    def score(self, problems: Sequence, completions: Sequence[str], *, where: str = "sample",
              index: Sequence[int] | None = None, train: bool = False
              ) -> tuple[list[float | None], list[bool]]:
        """(scores, exactly correct) per sample; a score of None means "no score".

        Any exception names the failing sample (`where` i, its prompt and completion); `index`
        gives each sample's number in the caller's batch (default: its position here).
        `train` marks the rollout's call (a reward model's running statistics use it)."""
        index = list(range(len(problems))) if index is None else list(index)
        if self.fn is None:
            scores, correct = [], []
            for i, (p, c) in enumerate(zip(problems, completions, strict=True)):
                try:
                    scores.append(float(self.task.score(p, c)))
                    correct.append(bool(self.task.is_correct(p, c)))
                except Exception as exc:
                    raise RewardError(self._name_sample(exc, where, index[i], p, c,
                                                        "task scorer")) from exc
            return [self.scale(s) for s in scores], correct
        prompts = [p.prompt for p in problems]
        answers = [p.answer for p in problems]
        meta = {"cluster": [p.cluster for p in problems]}
        try:
            out = self.fn(prompts, list(completions), answers, **meta)
        except RewardTimeout as exc:
            self._find_slow_sample(problems, completions, where, index, exc)
        except Exception as exc:
            # find the sample: call the function one sample at a time
            for i, (p, c) in enumerate(zip(problems, completions, strict=True)):
                try:
                    self.fn([p.prompt], [c], [p.answer], cluster=[p.cluster])
                except Exception as one:
                    raise RewardError(self._name_sample(one, where, index[i], p, c, self.spec)
                                      ) from one
            raise RewardError(f"reward function {self.spec} raised {type(exc).__name__}: {exc} "
                              f"on a batch of {len(prompts)} (no single sample fails alone)"
                              ) from exc
        if isinstance(out, Unconvertible) or not isinstance(out, list | tuple):
            raise RewardError(f"reward function {self.spec} returned {out!r}: expected a list "
                              f"of {len(prompts)} scores (float or None)")
        out = list(out)
        if len(out) != len(prompts):
            raise RewardError(f"reward function {self.spec} returned {len(out)} scores for "
                              f"{len(prompts)} completions")
        scores: list[float | None] = []
        for i, s in enumerate(out):
            if s is None:
                scores.append(None)
                continue
            try:
                value = float(s)
            except (TypeError, ValueError):
                value = math.nan
            if not math.isfinite(value) or abs(value) > MAX_ABS_REWARD:
                p = problems[i]
                raise RewardError(f"reward function {self.spec} returned {s!r} (not a finite "
                                  f"number within +-{MAX_ABS_REWARD:g}, or None) for {where} "
                                  f"{index[i]} (prompt {p.prompt!r}, completion "
                                  f"{completions[i]!r})")
            scores.append(value)
        correct = [s is not None and (s == 1.0 if self.binary else s >= 1.0) for s in scores]
        return [None if s is None else self.scale(s) for s in scores], correct

    def pop_metrics(self) -> dict[str, float]:
        """Metrics of the reward itself since the last call (a reward model logs its own)."""
        return {}

    def _find_slow_sample(self, problems, completions, where, index, exc) -> None:
        """Raise a RewardError naming the first sample that alone runs over the timeout."""
        for i, (p, c) in enumerate(zip(problems, completions, strict=True)):
            try:
                self.fn([p.prompt], [c], [p.answer], cluster=[p.cluster])
            except RewardTimeout:
                raise RewardError(f"{exc} on {where} {index[i]} (prompt {p.prompt!r}, "
                                  f"completion {c!r}); fix the function or raise "
                                  "reward.timeout_s") from None
            except Exception:  # noqa: BLE001 - another sample's error, not the hang
                continue
        raise RewardError(f"{exc} on a batch of {len(problems)} (each sample alone returns in "
                          "time): raise reward.timeout_s") from None

    @staticmethod
    def _name_sample(exc, where, i, problem, completion, who) -> str:
        what = str(exc) if isinstance(exc, RewardFailed) else f"{type(exc).__name__}: {exc}"
        return (f"{who} raised {what} on {where} {i} "
                f"(prompt {problem.prompt!r}, completion {completion!r})")


def build_reward(spec: str, task, scale: str = "none",
                 timeout_s: float | None = DEFAULT_TIMEOUT_S) -> Reward:
    """The `Reward` that `reward.fn: spec` names, for `task`, its scores mapped by `scale`
    (SCALES); a user function's calls bounded by `timeout_s` (None: unbounded, in this
    process)."""
    if spec not in BUILTIN and ":" not in spec:
        from lmpo.registry import nearest

        raise ConfigError(f"reward.fn {spec!r} unknown{nearest(spec, list(BUILTIN))}; valid: "
                          f"{', '.join(BUILTIN)} or path/to/file.py:function")
    return Reward(spec, task, scale, timeout_s)
