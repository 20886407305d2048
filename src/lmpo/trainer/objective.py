"""The update's objective as a list of terms, built once from the config.

Each term maps one micro-batch (`Micro`: its log-probs, entropies, mask, the minibatch's
global counts) to (its scalar, metrics averaged over the micro-batches, metrics summed over
them), and declares the metrics it logs; a term or mask that needs the whole minibatch
first has `begin_minibatch`:

- `PolicyTerm`: the loss's per-token loss, times its token masks and weights (each a
  small component: `CenteredScore`, which adds the centered score's term first;
  `OffPolicyMask`, OPSM for any loss; `ISWeights`, the rollout
  correction's weights; `TopEntropyMask`, the "80/20" high-entropy tokens), aggregated;
- `NLLTerm` (loss.nll_coef), `KLTerm` (kl.mode: loss), `EntropyTerm` (optim.entropy_coef),
  `ValueTerm` (the critic's clipped value loss).

`trainer/update.py` loops over them: a new cross-cutting feature is a new term or mask
here, never a branch in the loop. The terms are summed in this order, one backward per
micro-batch (tests/test_golden.py holds the rows to the committed golden rows, bit for
bit). A term says whether it is the policy term (`policy`): the one the same-batch
comparators replay with their own parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from lmpo.losses import (
    aggregate,
    centered_term,
    centering_coefficients,
    kl_penalty,
    off_policy_sequence_mask,
    sequence_divergence_mask,
    value_loss,
)
from lmpo.models.forward import critic_values


@dataclass
class Micro:
    """One micro-batch of the update, as every term and mask sees it."""

    batch: object  # lmpo.trainer.batch.TrainBatch
    idx: torch.Tensor  # the micro-batch's sample indices
    m: torch.Tensor  # [b, T] its (update) mask
    logp: torch.Tensor  # [b, T] with grad
    ent: torch.Tensor  # [b, T]
    counts: dict  # the minibatch's global token and sequence counts
    agg: str
    device: torch.device
    autocast: object  # a callable returning the update's autocast context
    entropy_coef: float | None = None  # this minibatch's, where optim.entropy_schedule sets it
    head: tuple | None = None  # (log pi at the sampler's head [b, T, k], its tail log-mass)


# ---------------------------------------------------------------- token masks and weights
@dataclass
class CenteredScore:
    """loss.centered_score: A_t sum_v sg(c_v) log pi(v) added to the score-function loss
    before the masks (lmpo.losses.centering), so a sequence's mask or weight multiplies
    both."""

    mode: str
    metrics: tuple = ("loss/centered_score/head_mass", "loss/centered_score/alpha_mean")

    def apply(self, loss_tok, x: Micro) -> tuple[torch.Tensor, dict]:
        _, q_logp, q_tail = (part[x.idx] if part is not None else None
                             for part in x.batch.behaviour_head)
        p_logp, p_tail = x.head
        coef, alpha = centering_coefficients(self.mode, q_logp, p_logp, q_tail, p_tail)
        out, m = {}, x.m.bool()
        if m.any():
            out["centered_score/head_mass"] = float(q_logp.exp().sum(-1)[m].mean())
            if alpha is not None:
                out["centered_score/alpha_mean"] = float(alpha[m].mean())
        return loss_tok + centered_term(p_logp, coef, x.batch.adv[x.idx], x.m), out


@dataclass
class OffPolicyMask:
    """loss.off_policy_mask_threshold: OPSM's sequence mask (DeepSeek-V3.2), any loss."""

    threshold: float
    metrics: tuple = ("loss/opsm/masked_frac", "loss/opsm/seq_kl_mean")

    def apply(self, loss_tok, x: Micro) -> tuple[torch.Tensor, dict]:
        keep, out = off_policy_sequence_mask(x.logp, x.batch.old_logp[x.idx], x.batch.adv[x.idx],
                                             x.m, self.threshold)
        return loss_tok * keep, out


@dataclass
class SequenceDivergenceMask:
    """loss.seq_divergence_threshold: a sequence mask on pi_old vs the sampler, any loss."""

    threshold: float
    kind: str = "tv"
    directional: bool = True
    metrics: tuple = ("loss/seq_divergence/masked_frac", "loss/seq_divergence/seq_over_frac",
                      "loss/seq_divergence/seq_div_mean")

    def apply(self, loss_tok, x: Micro) -> tuple[torch.Tensor, dict]:
        b = x.batch
        keep, out = sequence_divergence_mask(b.pre_update[x.idx], b.sampler_logp[x.idx],
                                             b.adv[x.idx], x.m, self.threshold, self.kind,
                                             self.directional)
        return loss_tok * keep.to(loss_tok.dtype), out


@dataclass
class ISWeights:
    """The rollout correction's token weights (verl: pg_losses * rollout_is_weights)."""

    metrics: tuple = ()

    def apply(self, loss_tok, x: Micro) -> tuple[torch.Tensor, dict]:
        w = x.batch.is_weights
        return (loss_tok if w is None else loss_tok * w[x.idx]), {}


@dataclass
class TopEntropyMask:
    """loss.top_entropy_quantile q < 1: the tokens whose entropy is at or above the
    minibatch's (1 - q) quantile (a no-grad pass over its micro-batches first, so that the
    selection does not depend on the micro-batch size). TRL takes the quantile over each
    micro-batch (gathered across processes)."""

    quantile: float
    metrics: tuple = ("loss/entropy_mask/kept_frac",)
    threshold: torch.Tensor | None = None

    def begin_minibatch(self, mb, resp_mask, *, forward, micro_size: int, **_) -> None:
        ents = []
        with torch.no_grad():
            for micro in mb.split(micro_size):
                ents.append(forward(micro)[1][resp_mask[micro] > 0])
        ents = torch.cat(ents)
        self.threshold = torch.quantile(ents, 1.0 - self.quantile) if ents.numel() else None

    def apply(self, loss_tok, x: Micro) -> tuple[torch.Tensor, dict]:
        if self.threshold is None:
            return loss_tok, {}
        keep = (x.ent.detach() >= self.threshold) & x.m.bool()
        return loss_tok * keep, {"entropy_mask/kept_frac":
                                 float(keep.sum()) / max(int(x.m.sum()), 1)}


# ---------------------------------------------------------------- terms
@dataclass
class PolicyTerm:
    """The policy loss: the loss's per-token loss, through its masks in order, aggregated
    by the loss's aggregation with the minibatch's global counts."""

    loss_fn: object
    masks: list = field(default_factory=list)
    name: str = "policy"
    policy: ClassVar[bool] = True  # what the same-batch comparators replay

    @property
    def metrics(self) -> tuple:
        return ("loss/*",) + tuple(m for mask in self.masks for m in mask.metrics)

    def __call__(self, x: Micro) -> tuple[torch.Tensor, dict, dict]:
        loss_tok, out = self.loss_fn(x.logp, x.batch.old_logp[x.idx], x.batch.adv[x.idx], x.m)
        for mask in self.masks:
            loss_tok, more = mask.apply(loss_tok, x)
            out = out | more
        return (aggregate(loss_tok, x.m, x.agg, **x.counts),
                {"loss/" + k: v for k, v in out.items()}, {})


@dataclass
class NLLTerm:
    """loss.nll_coef: the mean negative log-likelihood of the correct responses' tokens,
    with those tokens' own counts."""

    policy: ClassVar[bool] = False

    coef: float
    name: str = "nll"
    metrics: tuple = ()
    counts: dict = field(default_factory=dict)

    def begin_minibatch(self, mb, resp_mask, *, batch, counts: dict, **_) -> None:
        right = resp_mask[mb] * batch.correct[mb, None]
        self.counts = counts | {"num_tokens": right.sum(), "num_seqs": (right.sum(-1) > 0).sum()}

    def __call__(self, x: Micro) -> tuple[torch.Tensor, dict, dict]:
        return self.coef * aggregate(-x.logp * x.m, x.m * x.batch.correct[x.idx, None], x.agg,
                                     **self.counts), {}, {}


@dataclass
class KLTerm:
    """kl.mode: loss: the KL estimate to the reference in the loss; with
    kl.bias_correction, times the differentiable ratio pi / pi_old."""

    policy: ClassVar[bool] = False

    coef: float
    kind: str
    bias_correction: bool
    name: str = "kl"
    metrics: tuple = ()

    def __call__(self, x: Micro) -> tuple[torch.Tensor, dict, dict]:
        kl_tok = kl_penalty(x.logp, x.batch.ref_logp[x.idx], self.kind)
        if self.bias_correction:
            kl_tok = kl_tok * torch.exp((x.logp - x.batch.old_logp[x.idx]).clamp(-20, 20))
        coef = self.coef if x.batch.kl_coef is None else x.batch.kl_coef  # kl.schedule's
        return coef * aggregate(kl_tok, x.m, x.agg, **x.counts), {}, {}


@dataclass
class EntropyTerm:
    """optim.entropy_coef: an entropy bonus (a negative term)."""

    policy: ClassVar[bool] = False

    coef: float
    name: str = "entropy"
    metrics: tuple = ()

    def __call__(self, x: Micro) -> tuple[torch.Tensor, dict, dict]:
        coef = self.coef if x.entropy_coef is None else x.entropy_coef  # its schedule's
        return -coef * aggregate(x.ent, x.m, x.agg, **x.counts), {}, {}


@dataclass
class ValueTerm:
    """The critic's clipped value loss, token-mean, times critic.value_coef; logs
    value/loss (its unscaled sum over the micro-batches) and the value metrics."""

    policy: ClassVar[bool] = False

    critic: object
    coef: float
    clip: float | None
    name: str = "value"
    metrics: tuple = ("value/loss", "value/clipfrac")

    def __call__(self, x: Micro) -> tuple[torch.Tensor, dict, dict]:
        with x.autocast():
            v = critic_values(self.critic, x.batch.ids[x.idx], x.batch.mask[x.idx],
                              x.m.shape[1]).float()
        vl_tok, out = value_loss(v, x.batch.old_values[x.idx], x.batch.returns[x.idx], x.m,
                                 clip=self.clip)
        vl = aggregate(vl_tok, x.m, "token-mean", num_tokens=x.counts["num_tokens"])
        return self.coef * vl, out, {"value/loss": float(vl.detach())}


@dataclass
class Objective:
    """The terms in summation order, the token masks they own, and the aggregation of
    the loss (`loss.agg`, or the loss's registered default)."""

    terms: list
    masks: list
    agg: str

    def begin_minibatch(self, mb, resp_mask, **context) -> None:
        """Give the terms and masks that need the whole minibatch their look at it."""
        for part in [*self.terms, *self.masks]:
            if hasattr(part, "begin_minibatch"):
                part.begin_minibatch(mb, resp_mask, **context)

    @property
    def metrics(self) -> tuple:
        """Every metric the objective logs (`loss/*`: the loss's own)."""
        return tuple(m for t in self.terms for m in t.metrics) + tuple(
            f"loss/term_{t.name}" for t in self.terms)


def build_objective(cfg, loss_fn, agg: str, critic=None) -> Objective:
    """The objective `cfg` asks for: the policy term (with the centered score's term, OPSM,
    the sequence divergence mask, the correction's weights and the top-entropy mask, in that
    order), then NLL, KL, entropy and value terms."""
    masks: list = []
    if cfg.loss.centered_score is not None:  # first: the masks act on the centered loss
        masks.append(CenteredScore(cfg.loss.centered_score))
    if cfg.loss.off_policy_mask_threshold is not None:
        masks.append(OffPolicyMask(cfg.loss.off_policy_mask_threshold))
    if cfg.loss.seq_divergence_threshold is not None:
        masks.append(SequenceDivergenceMask(cfg.loss.seq_divergence_threshold,
                                            cfg.loss.seq_divergence_kind,
                                            cfg.loss.seq_divergence_directional))
    masks.append(ISWeights())
    if cfg.loss.top_entropy_quantile < 1.0:
        masks.append(TopEntropyMask(cfg.loss.top_entropy_quantile))
    terms: list = [PolicyTerm(loss_fn, masks)]
    if cfg.loss.nll_coef > 0:
        terms.append(NLLTerm(cfg.loss.nll_coef))
    if cfg.kl.coef > 0 and cfg.kl.mode == "loss":
        terms.append(KLTerm(cfg.kl.coef, cfg.kl.kind, cfg.kl.bias_correction))
    if cfg.optim.entropy_coef or cfg.optim.entropy_schedule.name != "fixed":
        terms.append(EntropyTerm(cfg.optim.entropy_coef))
    if critic is not None:
        terms.append(ValueTerm(critic, cfg.critic.value_coef, cfg.critic.value_clip))
    return Objective(terms, masks, agg)
