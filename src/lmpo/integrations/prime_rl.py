"""lmpo's losses inside prime-rl, through its custom-loss hook:

    [trainer.loss]
    type = "custom"
    import_path = "lmpo.integrations.prime_rl.loss"
    kwargs = { name = "cegppo", hparams = { beta1 = 0.5, beta2 = 1.0 } }

prime-rl calls the loss once per sample, `loss(inputs: LossInputs, **kwargs) ->
LossOutputs(loss, metrics)`, sums the samples' losses and divides by the global count of
loss tokens. `inputs` has the sample's `trainer_logprobs`, `inference_logprobs` (the
sampler's: lmpo's old_logp), `advantages`, `loss_mask` and optional `loss_weights`, each
[seq]. lmpo's per-token loss summed over the sample's tokens is therefore lmpo's
token-mean over the batch, exactly (`agg = "token-mean"`, the default). `agg =
"seq-mean-token-mean"` returns the sample's token mean instead; prime-rl still divides by
the batch's tokens, so the result is seq-mean-token-mean times sequences / tokens (a
per-batch scale of the step). The other modes need the batch's sequence count or a
horizon that a per-sample call does not see, and are refused. See docs/prime-rl.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from lmpo.errors import ConfigError
from lmpo.losses import get_loss

AGGS = ("token-mean", "seq-mean-token-mean")

try:  # prime-rl's own class where prime-rl is installed
    from prime_rl.trainer.rl.loss import LossOutputs
except ImportError:  # the same contract: prime-rl reads .loss and .metrics
    @dataclass
    class LossOutputs:
        loss: torch.Tensor  # 0-dim
        metrics: dict[str, torch.Tensor]


@lru_cache(maxsize=32)
def _bound(name: str, hparams: tuple):
    return get_loss(name, **dict(hparams))


def loss(inputs, *, name: str = "ppo_clip", hparams: dict | None = None,
         agg: str = "token-mean") -> LossOutputs:
    """lmpo loss `name` with `hparams` on one prime-rl sample (see the module docstring);
    metrics are the loss's own, as 0-dim tensors (prime-rl stacks them over samples)."""
    if agg not in AGGS:
        raise ConfigError(f"lmpo.integrations.prime_rl: agg {agg!r} is not expressible per "
                          f"sample; valid: {', '.join(AGGS)}")
    fn = _bound(name, tuple(sorted((hparams or {}).items())))
    mask = inputs.loss_mask.bool()[None]
    tok, metrics = fn(inputs.trainer_logprobs[None], inputs.inference_logprobs[None],
                      inputs.advantages[None], mask)
    if inputs.loss_weights is not None:  # prime-rl's per-token weight stream
        tok = tok * inputs.loss_weights[None]
    value = (tok * mask).sum()
    if agg == "seq-mean-token-mean":
        value = value / mask.sum().clamp(min=1)
    return LossOutputs(loss=value, metrics={k: torch.as_tensor(float(v))
                                            for k, v in metrics.items()})
