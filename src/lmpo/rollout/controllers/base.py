"""What every rollout controller provides, and what the stopping controllers share.

The sampler calls `begin_batch`, `step` at every decoding step and `end_batch`; the
trainer calls `diagnose` once the batch is scored, `observe` with each step's metrics row
after the update, and logs `metrics()`. A controller owns how a response it stopped is
scored (`stop_score`: a reward, e.g. ESPO's absorbing failure r_fail, or None: an
ordinary truncation, scored by the reward function like any other response; with
`bootstraps` the stop is a truncation whose return the critic's value at the stop
supplies), its extra diagnostics and its state (`state_dict`, checkpointed with the run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from lmpo.rollout.sampler import sample
from lmpo.rollout.types import Rollout


class RolloutController(Protocol):
    needs_values: bool  # the sampler must pass V(s_t) to `step`: the run needs a critic
    stop_score: float | None  # reward of a stopped response; None = scored as truncated
    bootstraps: bool  # a stop is a truncation: GAE bootstraps from V(s_t) at the stop

    def begin_batch(self, batch_size: int) -> None: ...

    def step(self, rows: torch.Tensor, regret: torch.Tensor, values: torch.Tensor | None,
             t: int) -> torch.Tensor:
        """Stop decisions `[len(rows)]` bool for the active rows at decoding step t."""

    def end_batch(self, regret: torch.Tensor, lengths: torch.Tensor) -> None: ...

    def diagnose(self, ctx: RolloutContext) -> dict[str, float]:
        """After scoring, before the update: extra diagnostics of this batch."""

    def observe(self, row: dict, step: int) -> None:
        """After the update: the step's metrics row (value loss, tokens, ...)."""

    def metrics(self) -> dict[str, float]: ...

    def state_dict(self) -> dict: ...

    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class RolloutContext:
    """What a controller's `diagnose` may use: the scored batch and how it was sampled.

    `reward` scores completions: `reward.score(problems, texts) -> (scores, correct)`."""

    policy: Any  # the policy, in sampling mode
    tokenizer: Any
    problems: list
    rollout: Rollout
    max_new_tokens: int
    temperature: float
    seed: int  # for a diagnostic's own generator (the run's random stream stays untouched)
    reward: Any
    eos_ids: list[int]


class BelowFailure(UserWarning):
    """r_fail is set below a failure's reward: a stop is penalised beyond failing."""


def resolve_r_fail(r_fail: float | None, failure_reward: float | None,
                   reward_range: tuple[float | None, float | None]) -> tuple[float, list[str]]:
    """(a stopped response's reward, notes): `r_fail`, or by default a failure's reward (a
    stop counts as a failure). A value below that reward is allowed; the note says so and
    the run warns with it (`BelowFailure`)."""
    if r_fail is None:
        if failure_reward is None:
            raise ValueError("r_fail: this run's reward (a user function or a reward model) "
                             "declares no failure reward; set controller.hparams.r_fail")
        return float(failure_reward), []
    if failure_reward is not None and r_fail < failure_reward:
        low, high = reward_range
        return float(r_fail), [f"controller.hparams.r_fail={r_fail} is below a failure's "
                               f"reward {failure_reward} (rewards span [{low}, {high}]): a "
                               "stopped response is penalised beyond failing"]
    return float(r_fail), []


STOP_VALUES = ("absorbing", "bootstrap")


class StopAccounting:
    """What every stopping controller shares: the batch's stopped rows, the stop rate, the
    stop positions, the token savings and the false-positive pass.

    `stop_value`: "absorbing" (the paper's: a stopped response ends in an absorbing failure
    state with reward r_fail, no bootstrap) or "bootstrap" (the no-r_fail ablation as the
    spec reads it: no terminal reward, and GAE bootstraps the stopped response's return
    from the critic's V(s_t) at the stop, so a stop is a truncation, neither a failure
    nor a 0 score; it needs a critic).

    Savings are measured, not guessed: with `measure_false_positives` a copy of every
    stopped sequence is finished (`finish_stopped`) and the tokens it would still have
    generated are reported (`espo/would_be_extra_tokens`); savings = extra / (generated +
    extra), cumulative over the run.
    """

    _ACCOUNTING = ("last_stop_rate", "tokens_cum", "extra_cum")
    # the keyword-only hyper-parameters every stopping controller declares and passes here
    SHARED = ("r_fail", "min_tokens", "measure_false_positives", "failure_reward",
              "reward_range", "stop_value")

    @classmethod
    def shared(cls, values: dict) -> dict:
        """The shared settings among a subclass's `__init__` arguments (its `locals()`)."""
        return {k: values[k] for k in cls.SHARED}

    def __init__(self, *, r_fail: float | None, min_tokens: int, measure_false_positives: bool,
                 failure_reward: float | None = None,
                 reward_range: tuple[float | None, float | None] = (None, None),
                 stop_value: str = "absorbing"):
        if min_tokens < 1:
            raise ValueError(f"min_tokens must be >= 1, got {min_tokens}")
        if stop_value not in STOP_VALUES:
            raise ValueError(f"unknown stop_value {stop_value!r}; valid: "
                             f"{', '.join(STOP_VALUES)}")
        self.bootstraps = stop_value == "bootstrap"
        if self.bootstraps:
            if r_fail is not None:
                raise ValueError(f"r_fail={r_fail} applies to stop_value absorbing; with "
                                 "stop_value bootstrap a stop has no terminal reward")
            self.r_fail, self.notes = 0.0, []
        else:
            self.r_fail, self.notes = resolve_r_fail(r_fail, failure_reward, reward_range)
        self.min_tokens = min_tokens
        self.measure_false_positives = measure_false_positives
        self.last_stop_rate, self.tokens_cum, self.extra_cum = 0.0, 0.0, 0.0
        self._stopped = torch.zeros(0, dtype=torch.bool)

    @property
    def stop_score(self) -> float:
        """A stopped response is an absorbing failure with reward r_fail (with
        `bootstraps`: no terminal reward, 0, its return bootstrapped by GAE)."""
        return self.r_fail

    def begin_batch(self, batch_size: int) -> None:
        self._stopped = torch.zeros(batch_size, dtype=torch.bool)

    def end_batch(self, regret: torch.Tensor, lengths: torch.Tensor) -> None:
        self.last_stop_rate = float(self._stopped.double().mean()) if len(self._stopped) else 0.0

    def diagnose(self, ctx: RolloutContext) -> dict[str, float]:
        """The responses that ended early (a stop at an EOS is an EOS) and where; with
        `measure_false_positives`, the finishing pass."""
        rollout = ctx.rollout
        stopped = [i for i, r in enumerate(rollout.stop_reason) if r == "early_stop"]
        out = {"espo/stopped": float(len(stopped)),
               "espo/stop_position_mean": float(rollout.lengths[stopped].float().mean())
               if stopped else 0.0}
        return out | (finish_stopped(ctx) if self.measure_false_positives else {})

    def observe(self, row: dict, step: int) -> None:
        self.tokens_cum += float(row.get("tokens/generated", 0.0))
        self.extra_cum += float(row.get("espo/would_be_extra_tokens", 0.0))

    @property
    def savings(self) -> float:
        total = self.tokens_cum + self.extra_cum
        return self.extra_cum / total if total else 0.0

    def metrics(self) -> dict[str, float]:
        return {"espo/stop_rate": self.last_stop_rate, "espo/savings_cum": self.savings}

    def _state(self, names) -> dict:
        return {k: getattr(self, k) for k in (*self._ACCOUNTING, *names)}

    def _load(self, state: dict, names) -> None:
        for k in (*self._ACCOUNTING, *names):
            setattr(self, k, state[k])


def finish_stopped(ctx: RolloutContext) -> dict[str, float]:
    """Let a copy of every early-stopped sequence run to its end.

    Returns the false-positive stop rate (share of stopped sequences whose finished copy
    is exactly correct, by `ctx.reward`), the mean would-have-been length and the tokens
    the copies generated past their stop (`espo/would_be_extra_tokens`, what stopping
    saved). Samples with its own generator (seeded by `ctx.seed`), so the training run's
    random stream is untouched.
    """
    rollout, tok = ctx.rollout, ctx.tokenizer
    stopped = [i for i, r in enumerate(rollout.stop_reason) if r == "early_stop"]
    if not stopped:
        return {}
    prefixes, room = [], []
    for i in stopped:
        n = int(rollout.lengths[i])
        prompt = rollout.prompt_ids[i][rollout.prompt_mask[i].bool()].tolist()
        prefixes.append(prompt + rollout.response_ids[i, :n].tolist())
        room.append(ctx.max_new_tokens - n)
    rest = sample(ctx.policy, prefixes, max_new_tokens=max(1, max(room)),
                  temperature=ctx.temperature, eos_token_id=ctx.eos_ids,
                  pad_token_id=tok.pad_token_id,
                  generator=torch.Generator().manual_seed(ctx.seed))
    texts, lengths, saved = [], [], []
    for j, i in enumerate(stopped):
        n, extra = int(rollout.lengths[i]), min(int(rest.lengths[j]), max(room[j], 0))
        ids = rollout.response_ids[i, :n].tolist() + rest.response_ids[j, :extra].tolist()
        texts.append(tok.decode(ids, skip_special_tokens=True))
        lengths.append(n + extra)
        saved.append(extra)
    correct = [float(ok) for ok in ctx.reward.score([ctx.problems[i] for i in stopped],
                                                    texts)[1]]
    return {"espo/false_positive_rate": sum(correct) / len(correct),
            "espo/would_be_length_mean": sum(lengths) / len(lengths),
            "espo/would_be_extra_tokens": float(sum(saved))}
