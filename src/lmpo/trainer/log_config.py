"""`lmpo train`'s `log:` section: evaluation, checkpoints, diagnostics and same-batch
comparators (part of `lmpo.trainer.train_config.TrainConfig`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from lmpo.choices import EVAL_STREAMS, one_of
from lmpo.domains import dom
from lmpo.legacy import replaced


@dataclass
class LogConfig:
    replaced_keys: ClassVar[dict[str, str]] = replaced("log")
    eval_every: int = dom(10, "int [1, inf)")
    """Held-out evaluation every N steps (and before the first and after the last)."""
    eval_per_tier: int = dom(100, "int [1, inf)")
    """Held-out problems per tier (fewer where a tier has too few distinct problems)."""
    eval_max_new_tokens: int = dom(32, "int [1, inf)")
    eval_temperature: float = dom(0.0, "[0, inf)")
    """0 = greedy; > 0 samples `eval_samples` completions per problem (accuracy = mean@k)."""
    eval_samples: int = dom(1, "int [1, inf)")
    eval_stream: str = dom("per_problem", one_of(EVAL_STREAMS))
    """Sampled evaluation only: per_problem (each held-out problem's sample j draws from a
    stream of its own, so arms and seeds sample a problem with common random numbers,
    whatever the batch) | shared (one stream for the whole set, as earlier lmpo did: a
    saved run config without this key ran with it). `lmpo.evaluate`."""
    checkpoint_every: int = dom(10, "int [1, inf)")
    keep_checkpoints: int = 2
    entropy_head_tokens: int = dom(0, "int [0, inf)")
    """k > 0: log policy/entropy_head, the entropy over each response's first k tokens."""
    policy_kl_every: int = dom(5, "int [1, inf)")
    """On steps 1, 1+N, ...: KL to the reference, KL between consecutive policies (float32,
    before and after the update), the rollout's log-prob mismatch and the post-update
    diag/*_after diagnostics (one extra forward pass over the batch each)."""
    full_mismatch: bool = False
    """On diagnostic steps where the sampler is not the float32 policy (a low-precision or
    stale rollout): also the vocabulary-wide gap between the two next-token distributions
    at the sampled positions, rollout/full_tv and rollout/full_kl (KL(sampler || policy)),
    beside rollout/logp_mismatch's sampled-token one (SkyRL #2201; one more pass of each
    model over the batch, chunked)."""
    tensorboard: bool = True
    wandb: dict[str, Any] | None = None
    """Weights & Biases next to TensorBoard: {project, mode (offline by default), dir, name,
    entity, tags} (lmpo.trainer.trackers); None = off."""
    diagnostics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Parameters of the post-update diagnostics (lmpo.losses.diagnostics), by name: these
    override the loss's own hyper-parameter and the diagnostic's default."""
    comparators: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Same-batch comparators (lmpo.trainer.comparators), by name: {loss: {name, hparams, agg},
    advantage: {name, hparams}, controller: {name, hparams}}, each part left out being the
    run's own. Evaluated on every minibatch without changing the update; logs
    shadow/<name>/weight_tv, weight_cos, adv_tv (an estimator), stop_diff (a controller).
    `lmpo compare` gives each arm of a two-arm claim the other arm's parts."""
    shadow_grad_cos: bool = False
    """With comparators: on diagnostic steps, also the cosine of the two parameter gradients
    of the policy-loss term, per minibatch (shadow/<name>/grad_cos; per micro-batch one
    extra backward pass per comparator and one for the run's own term)."""
