"""Stale rollouts (`rollout.staleness: k`): the policy versions an asynchronous engine
samples with.

Version v is the policy after v optimiser-step batches (v = 0 is the start). Step s
(1-based) starts from version s - 1; with staleness k its responses are sampled by
version max(0, s - 1 - k), and their behaviour log-probs are that version's (as in
AReaL, prime-rl or verl's fully-async mode, where the rollout engine runs k versions
behind the trainer). The history keeps the last k + 1 versions, checkpointed with the
run, so a resumed run samples with the same weights as the uninterrupted one.
"""

from __future__ import annotations

import torch

from lmpo.trainer.checkpoint import CheckpointError


class PolicyHistory:
    """The last `k + 1` policy versions (state dicts, oldest first)."""

    def __init__(self, k: int):
        if k < 1:
            raise ValueError(f"staleness must be >= 1 for a history, got {k}")
        self.k = k
        self.versions: list[dict[str, torch.Tensor]] = []

    @torch.no_grad()
    def advance(self, policy) -> dict[str, torch.Tensor]:
        """Record the version a step starts from; returns the version to sample with (k
        versions older, or the oldest kept while fewer than k have passed)."""
        self.versions.append({n: t.detach().clone() for n, t in policy.state_dict().items()})
        del self.versions[:-(self.k + 1)]
        return self.versions[0]

    @property
    def lag(self) -> int:
        """How many versions behind the live policy the sampling version is."""
        return len(self.versions) - 1

    def state_dict(self) -> dict:
        return {"k": self.k, "versions": self.versions}

    def load_state_dict(self, state: dict) -> None:
        if state["k"] != self.k:

            raise CheckpointError(f"checkpoint has staleness {state['k']}, this run "
                                  f"{self.k}")
        self.versions = list(state["versions"])
