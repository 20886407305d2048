"""Post-update diagnostics: where an update has moved the sampled tokens.

Minibatch averages include the first minibatch (rho ~ 0), so a claim about where an
update *ends* reads a pass over the whole batch after the update. Each diagnostic is
`fn(new_logp, old_logp, adv, mask, *, <parameters>) -> {"diag/...": float}` with
`new_logp` the policy after the update, `old_logp` the ratio's anchor, all `[B, T]`
(`adv` may be `[B]`). A loss names the ones it needs in its `post_update` metadata, each
parameter bound to one of its hyper-parameters or left at the diagnostic's default;
`log.diagnostics: {name: {parameter: value}}` overrides both.
"""

from __future__ import annotations

import functools

from lmpo.losses.base import displacement_metrics
from lmpo.losses.registry import LOSSES
from lmpo.registry import Registry

POST_UPDATE = Registry("post-update diagnostic")


@POST_UPDATE.register("displacement")
def displacement_after(new_logp, old_logp, adv, mask) -> dict[str, float]:
    """diag/displacement_after: mean |rho| per token; diag/displacement_seq_after: the sum
    of |rho| over a sequence, averaged over sequences."""
    m = displacement_metrics(new_logp - old_logp, adv, mask)
    return {"diag/displacement_after": m["displacement"],
            "diag/displacement_seq_after": m["displacement_seq"]}


def bind_post_update(loss: str, hparams: dict, overrides: dict | None = None) -> list:
    """The post-update diagnostics loss `loss` (with `hparams`) asks for, their parameters
    bound: `log.diagnostics` overrides, else the loss's hyper-parameter, else the default."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(POST_UPDATE.names()))
    if unknown:
        raise KeyError(f"unknown post-update diagnostic(s) {unknown}; valid: "
                       f"{', '.join(POST_UPDATE.names())}")
    own = LOSSES.hparams(loss) | hparams
    bound = []
    for name, params in LOSSES.meta(loss)["post_update"].items():
        values = {param: own[hp] for param, hp in params.items()} | overrides.get(name, {})
        fn = POST_UPDATE.get(name, **values)
        bound.append(functools.update_wrapper(functools.partial(fn), fn))
    return bound
