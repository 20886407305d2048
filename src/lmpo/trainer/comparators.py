"""Same-batch comparators: how far another method's update would be from this run's,
measured on this run's own batch, without changing the update. (Their metrics keep the
prefix `shadow/` and their checkpoint the key "shadows", the names committed rows and
checkpoints were written with.)

A run names comparators under `log.comparators`, each a set of parts that replace the
run's own: a loss (name, hparams, agg), an advantage estimator, a rollout controller;
a part left out is the run's. On every minibatch the policy-loss term's per-token
gradient weights g = d(aggregated policy loss)/d logp are computed for the run's loss and
for each comparator, on the same log-probs, anchors, advantages (the comparator's own
estimator where it names one), mask and rollout-correction weights; KL, NLL and entropy
terms are shared by design and left out. Logged per step, token-weighted over the step's
minibatches:

- `shadow/<name>/weight_tv`: total variation between the two weight vectors, each
  normalised to unit L1 mass: 0 = the same direction in log-prob space, 1 = disjoint
  (0 when both are all zero, 1 when only one is);
- `shadow/<name>/weight_cos`: their cosine (1 when both are zero, 0 when only one is);
- `shadow/<name>/adv_tv`: the same distance between the two advantage vectors (a
  comparator estimator only);
- `shadow/<name>/stop_diff`: the share of samples whose stop decision the comparator
  controller, replayed on this rollout's regret (and values), would have made otherwise;
  a comparator controller that scores a stop otherwise than the run's (another r_fail, a
  stop bootstrapped instead of absorbing) also gets the run's estimator's advantages with
  the stopped responses scored its way (a copy of the estimator, with its own state), so
  its `weight_tv` and `adv_tv` measure what the scoring changes in the update;
- `shadow/<name>/grad_cos` (with `log.shadow_grad_cos`, on diagnostic steps): the cosine
  of the two parameter gradients of the policy-loss term, per minibatch, token-weighted
  over the step's minibatches like the others.

Nothing here draws random numbers or touches `.grad`, so a run's other metrics are
bit-identical with and without comparators. A comparator with state (an estimator's global
moments, a controller's EMAs) keeps its own, checkpointed with the run (`state_dict`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from lmpo.advantages import advantage_meta
from lmpo.config import ConfigError
from lmpo.losses import aggregate, default_aggregation, loss_meta
from lmpo.models.forward import critic_values
from lmpo.rollout import CONTROLLERS
from lmpo.trainer.advantage import comparator_advantages, rescored_advantages
from lmpo.trainer.parts import controller_part, estimator_part, loss_part

PREFIX = "shadow/"


def l1_tv(a: torch.Tensor, b: torch.Tensor) -> float:
    """Total variation between `a` and `b` (1-D), each normalised to unit L1 mass: 0 when
    both are all zero, 1 when only one is."""
    a, b = a.double(), b.double()
    na, nb = float(a.abs().sum()), float(b.abs().sum())
    if na == 0 or nb == 0:
        return 0.0 if na == nb else 1.0
    return 0.5 * float((a / na - b / nb).abs().sum())


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine of `a` and `b` (1-D): 1 when both are all zero, 0 when only one is."""
    a, b = a.double(), b.double()
    na, nb = float(a.norm()), float(b.norm())
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    return max(-1.0, min(1.0, float(a @ b) / (na * nb)))  # rounding stays in [-1, 1]


@dataclass
class Comparator:
    """One comparator, built: the parts it replaces (None = the run's own)."""

    name: str
    loss_fn: object | None = None
    agg: str | None = None
    estimator: object | None = None
    estimator_name: str | None = None
    controller: object | None = None
    rescore: bool = False  # a controller that scores a stop otherwise: the run's estimator
    adv: torch.Tensor | None = None  # [B, T] this step's advantages (with an estimator)
    _main: list = field(default_factory=list)  # this minibatch's weight vectors
    _mine: list = field(default_factory=list)
    _grads: list | None = None  # both parameter gradients over this minibatch

    def state_dict(self) -> dict:
        return {part: getattr(self, part).state_dict()
                for part in ("estimator", "controller") if getattr(self, part) is not None}

    def load_state_dict(self, state: dict) -> None:
        for part, saved in state.items():
            getattr(self, part).load_state_dict(saved)


def build_comparators(cfg) -> list[Comparator]:
    """The comparators `cfg.log.comparators` names, built by the functions that build the
    run's own parts (a bad part is a ConfigError naming its key)."""
    out = []
    for name, spec in (cfg.log.comparators or {}).items():
        where = f"log.comparators.{name}"
        if not isinstance(spec, dict) or set(spec) - set(PARTS) or not spec:
            raise ConfigError(f"{where} must map some of {', '.join(PARTS)} to a part "
                              f"({{name, hparams}}; a loss may add agg), got {spec!r}")
        comp = Comparator(str(name))
        try:
            for part, sub in spec.items():
                PARTS[part](comp, dict(sub), spec, cfg)
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {exc.args[0] if exc.args else exc}") from None
        check_family(comp, cfg, where)
        out.append(comp)
    return out


def replace_loss(comp: Comparator, loss: dict, spec: dict, cfg) -> None:
    comp.loss_fn, comp.agg = loss_part(loss["name"], loss.get("hparams"),
                                       loss.get("agg") or cfg.loss.agg)


def replace_advantage(comp: Comparator, adv: dict, spec: dict, cfg) -> None:
    comp.estimator = estimator_part(adv["name"], adv.get("hparams"))
    comp.estimator_name = adv["name"]


def replace_controller(comp: Comparator, ctl: dict, spec: dict, cfg) -> None:
    """The comparator's controller; where it scores a stop otherwise than the run's and
    the comparator names no estimator, a copy of the run's estimator to rescore with."""
    comp.controller = controller_part(cfg, ctl["name"], ctl.get("hparams"))
    own = controller_part(cfg, cfg.controller.name, cfg.controller.hparams)
    if "advantage" not in spec and scores_differ(comp.controller, own):
        comp.rescore = True
        comp.estimator = estimator_part(cfg.advantage.name, cfg.advantage.hparams)
        comp.estimator_name = cfg.advantage.name


# the parts a comparator may replace (its `log.comparators` keys), each with its builder
PARTS = {"loss": replace_loss, "advantage": replace_advantage,
         "controller": replace_controller}


def twins(cfg) -> dict[str, dict]:
    """{method: its ablated twin as a `log.comparators` entry} for each part of `cfg` whose
    registration declares one (metadata `twin`): the same run with only the method's own
    mechanism removed. A twin of the same registered part keeps the run's hyper-parameters
    under the twin's own (CE-GPPO with beta1 = beta2 = 0), and a loss twin keeps the run's
    aggregation, so the twin differs from the run in the mechanism alone."""
    own = {"loss": (cfg.loss, loss_meta), "advantage": (cfg.advantage, advantage_meta),
           "controller": (cfg.controller, CONTROLLERS.meta)}
    out = {}
    for part, (section, meta) in own.items():
        twin = meta(section.name)["twin"]
        if not twin:
            continue
        spec = {}
        for kind, sub in twin.items():
            sub = {k: dict(v) if isinstance(v, dict) else v for k, v in sub.items()}
            if kind == part and sub["name"] == section.name:
                sub["hparams"] = dict(section.hparams or {}) | sub.get("hparams", {})
            if kind == "loss":
                sub.setdefault("agg", cfg.loss.agg or default_aggregation(cfg.loss.name))
            spec[kind] = sub
        out[section.name] = spec
    return out


def scores_differ(theirs, mine) -> bool:
    """Whether two stopping controllers score a stopped response differently (a stop score,
    or bootstrapping it); a controller that never scores a stop ("none") is left out."""
    if theirs.stop_score is None or mine.stop_score is None:
        return False
    return (float(theirs.stop_score), bool(getattr(theirs, "bootstraps", False))) != (
        float(mine.stop_score), bool(getattr(mine, "bootstraps", False)))


def check_family(comp: Comparator, cfg, where: str) -> None:
    """A comparator estimator that trains a critic needs a run that has one."""

    name = comp.estimator_name
    if name and advantage_meta(name)["needs_critic"] and not cfg.actor_critic:
        raise ConfigError(f"{where}: estimator {name!r} needs the critic's values, and this run "
                          "trains no critic")
    if comp.controller is not None and comp.controller.needs_values and not cfg.actor_critic:
        raise ConfigError(f"{where}: this controller needs the critic's per-step values, and "
                          "this run trains no critic")


def build_comparator_observer(cfg, loss_fn) -> ComparatorObserver | None:
    """The run's comparators beside the run's own built loss `loss_fn` (None when it names
    none)."""
    comparators = build_comparators(cfg)
    if not comparators:
        return None
    return ComparatorObserver(comparators, loss_fn, cfg.log.shadow_grad_cos)


class ComparatorObserver:
    """Every comparator of a run: an observer of the step (hooks `begin_step`, `micro`,
    `end_minibatch`, `end_step`; checkpointed under `key`), fed by the trainer at each
    stage without changing the update."""

    key = "shadows"  # the checkpoint key runs were saved with

    def __init__(self, comparators: list[Comparator], loss_fn, grad_cos: bool = False):
        self.comparators = comparators
        self.loss_fn = loss_fn  # the run's own loss: a comparator that keeps it uses it
        self.grad_cos = grad_cos
        self._sums: dict[str, float] = {}
        self._weight = 0.0
        self._row: dict[str, float] = {}
        self._want_grads = False

    @property
    def aggs(self) -> set:
        """The aggregations the comparators' own losses use (None: the run's)."""
        return {c.agg for c in self.comparators}

    # ------------------------------------------------------------ per step
    def begin_step(self, state, batch, scored, cfg, *, diagnostic: bool) -> None:
        """Before the update: each comparator estimator's advantages on this batch (and
        their distance from the run's), each controller's replayed stop decisions."""

        self._sums, self._weight, self._row = {}, 0.0, {}
        self._want_grads = self.grad_cos and diagnostic
        keep = batch.keep.to(batch.adv.device)
        mask = batch.resp_mask[keep].bool()
        for comp in self.comparators:
            comp._grads = None
            if comp.rescore:
                comp.adv = rescored_advantages(comp.estimator, comp.estimator_name,
                                               comp.controller, batch, scored, cfg)
            elif comp.estimator is not None:
                comp.adv = comparator_advantages(comp.estimator, comp.estimator_name, batch,
                                                 scored, cfg)
            if comp.adv is not None:
                self._row[f"{PREFIX}{comp.name}/adv_tv"] = l1_tv(
                    batch.adv[keep][mask], comp.adv[keep][mask])
            if comp.controller is not None:
                self._row[f"{PREFIX}{comp.name}/stop_diff"] = stop_diff(
                    comp.controller, scored.rollout, state.critic, batch)

    def micro(self, logp: torch.Tensor, policy_term: torch.Tensor, batch, micro: torch.Tensor,
              m: torch.Tensor, counts: dict, agg: str, params: list) -> None:
        """One micro-batch of the update: the run's weights, d(policy_term)/d logp through
        the run's own graph (kept for its backward), and each comparator's, from the
        micro-batch's log-probs detached (the run's graph is not touched)."""
        if not self.comparators:
            return
        valid = m.bool()
        (main,) = torch.autograd.grad(policy_term, logp, retain_graph=True, allow_unused=True)
        main = torch.zeros_like(logp) if main is None else main.detach() * m
        lp = logp.detach().requires_grad_(True)
        old, adv = batch.old_logp[micro], batch.adv[micro]
        isw = None if batch.is_weights is None else batch.is_weights[micro]
        for comp in self.comparators:
            if comp.loss_fn is None and comp.adv is None:
                mine = main  # a controller alone leaves the update's weights as they are
            else:
                mine = token_weights(lp, old, adv if comp.adv is None else comp.adv[micro], m,
                                     comp.loss_fn or self.loss_fn, comp.agg or agg, counts, isw)
            comp._main.append(main[valid])
            comp._mine.append(mine[valid])
            if self._want_grads:
                self._param_grads(comp, logp, main, mine, params)

    @staticmethod
    def _param_grads(comp: Comparator, logp, main, mine, params: list) -> None:
        """Accumulate both parameter gradients of the policy-loss term (J^T g) over the
        minibatch's micro-batches; `.grad` is left alone."""
        both = [torch.autograd.grad(logp, params, grad_outputs=g.to(logp.dtype),
                                    retain_graph=True, allow_unused=True) for g in (main, mine)]
        flat = [torch.cat([(x if x is not None else torch.zeros_like(p)).flatten().double()
                           for x, p in zip(gs, params, strict=True)]) for gs in both]
        comp._grads = flat if comp._grads is None else [a + b for a, b in
                                                        zip(comp._grads, flat, strict=True)]

    def end_minibatch(self) -> None:
        """Fold this minibatch's distances into the step's token-weighted sums."""
        if not self.comparators:
            return
        n = None
        for comp in self.comparators:
            if not comp._main:
                continue
            a, b = torch.cat(comp._main), torch.cat(comp._mine)
            comp._main, comp._mine = [], []
            n = float(a.numel())
            for key, value in (("weight_tv", l1_tv(a, b)), ("weight_cos", cosine(a, b))):
                full = f"{PREFIX}{comp.name}/{key}"
                self._sums[full] = self._sums.get(full, 0.0) + value * n
            if comp._grads is not None:
                full = f"{PREFIX}{comp.name}/grad_cos"
                self._sums[full] = self._sums.get(full, 0.0) + cosine(*comp._grads) * n
                comp._grads = None
        if n is not None:
            self._weight += n

    def end_step(self, row: dict, step: int) -> dict:
        """The step's comparator metrics (`shadow/<name>/...`); each comparator controller
        observes the run's row (its warm-up reads the run's value loss), as the run's own
        controller does."""
        out = dict(self._row)
        if self._weight > 0:
            out |= {k: v / self._weight for k, v in self._sums.items()}
        for comp in self.comparators:
            comp.adv = None
            if comp.controller is not None:
                comp.controller.observe(row, step)
        return out

    # ------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict:
        return {c.name: c.state_dict() for c in self.comparators}

    def load_state_dict(self, state: dict) -> None:
        """A comparator the checkpoint does not hold starts fresh (`log.*` may change on
        resume); the others continue from their saved state."""
        for comp in self.comparators:
            if comp.name in state:
                comp.load_state_dict(state[comp.name])


def token_weights(lp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, m: torch.Tensor,
                  loss_fn, agg: str, counts: dict, isw: torch.Tensor | None) -> torch.Tensor:
    """g = d(aggregated policy loss)/d logp per token [b, T] (0 off the mask)."""
    with torch.enable_grad():
        loss_tok, _ = loss_fn(lp, old, adv, m)
        if isw is not None:
            loss_tok = loss_tok * isw
        (g,) = torch.autograd.grad(aggregate(loss_tok, m, agg, **counts), lp,
                                   allow_unused=True)
    return torch.zeros_like(lp) if g is None else g.detach() * m


def stop_diff(controller, rollout, critic, batch) -> float:
    """Replay `controller` over `rollout` token by token (its own state, the rollout's
    regret and values) and return the share of samples whose stop decision differs from
    the one the run's controller made: a stop at another position, or a stop where there
    was none (a stop at a row's EOS is an EOS, as in the sampler)."""
    b, t = rollout.response_ids.shape
    lengths = rollout.lengths
    values = rollout.values
    if controller.needs_values and values is None:
        with torch.no_grad():
            values = critic_values(critic, batch.ids, batch.mask, t).float().cpu()
    regret = rollout.regret
    first = torch.full((b,), -1, dtype=torch.long)
    controller.begin_batch(b)
    for step in range(t):
        rows = ((lengths > step) & (first < 0)).nonzero().flatten()
        if not len(rows):
            break
        stop = controller.step(rows, regret[rows, step],
                               None if values is None else values[rows, step], step)
        first[rows[stop]] = step
    controller.end_batch(regret, lengths)
    eos = torch.tensor([r == "eos" for r in rollout.stop_reason])
    mine = (first >= 0) & ~(eos & (first == lengths - 1))
    theirs = torch.tensor([r == "early_stop" for r in rollout.stop_reason])
    same = (mine == theirs) & (~mine | (first == lengths - 1))
    return float((~same).double().mean()) if b else 0.0
