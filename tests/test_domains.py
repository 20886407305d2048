"""Hyper-parameter domains: every registered part declares one for each of its
hyper-parameters; inside it, the part builds and one step on random tensors runs; outside
it, building fails with one line naming the key and the domain."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from lmpo.advantages.base import ADVANTAGES
from lmpo.domains import parse
from lmpo.errors import ConfigError
from lmpo.losses.diagnostics import POST_UPDATE
from lmpo.methods import registries
from lmpo.rollout.controllers.registry import CONTEXT

# every part kind lmpo registers (lmpo.methods), and the post-update diagnostics
REGISTRIES = registries() | {"post-update": POST_UPDATE}
PARAMS = [(kind, name, hp) for kind, reg in REGISTRIES.items() for name in reg.names()
          for hp in reg.hparams(name) if hp not in CONTEXT]


def hparams_of(reg, name) -> dict:
    return {k: v for k, v in reg.hparams(name).items() if k not in CONTEXT}


def test_every_hyper_parameter_of_every_part_has_a_domain():
    missing = [f"{kind} {name}: {hp}" for kind, name, hp in PARAMS
               if hp not in REGISTRIES[kind].domains(name)]
    assert not missing, missing
    extra = [f"{kind} {name}: {hp}" for kind, reg in REGISTRIES.items() for name in reg.names()
             for hp in reg.domains(name) if hp not in reg.hparams(name)]
    assert not extra, extra


@pytest.mark.parametrize("kind,name,hp", PARAMS, ids=lambda x: str(x))
def test_every_default_lies_in_its_domain(kind, name, hp):
    reg = REGISTRIES[kind]
    assert reg.domains(name)[hp].contains(reg.hparams(name)[hp])


def test_domain_specs_parse_as_written():
    d = parse("(1, inf) | None")
    assert d.contains(None) and d.contains(1.5) and not d.contains(1.0)
    assert not d.contains(math.inf) and parse("(0, inf]").contains(math.inf)
    assert parse("(0, 1]").contains(1) and not parse("(0, 1]").contains(0)
    assert not parse("[0, 1]").contains(math.nan) and not parse("[0, 1]").contains(True)
    assert parse("int [1, inf)").contains(3) and not parse("int [1, inf)").contains(2.5)
    assert parse("{sign, abs}").contains("abs") and not parse("{sign, abs}").contains("sqr")
    assert parse("bool").contains(False) and not parse("bool").contains(0)
    with pytest.raises(ValueError, match="not a domain spec"):
        parse("positive")


def valid(domain):
    """Values inside `domain` (None only through the defaults: a None may need a partner)."""
    if domain.kind == "bool":
        return st.booleans()
    if domain.kind == "choice":
        return st.sampled_from(domain.choices)
    if domain.kind == "path":
        return st.nothing()  # a path must name something that exists: defaults cover it
    lo = max(domain.low, -1e6)
    hi = min(domain.high, 1e6)
    if domain.kind == "int":
        return st.integers(int(math.ceil(lo + (0 if domain.low_closed else 1e-9))),
                           int(min(hi, 1e4)))
    floats = st.floats(lo, hi, exclude_min=not domain.low_closed and lo == domain.low,
                       exclude_max=not domain.high_closed and hi == domain.high,
                       allow_nan=False)
    if domain.high == math.inf and domain.high_closed:
        floats = floats | st.just(math.inf)
    return floats


def invalid(domain):
    """Values outside `domain`: past its bounds, NaN, the wrong type, an unknown choice."""
    wrong = [math.nan, "text", [1], {"a": 1}]
    if domain.kind in ("real", "int"):
        if domain.low > -math.inf:
            wrong += [domain.low - 1.0, domain.low - 1e-3] + ([domain.low] if not
                                                                domain.low_closed else [])
        if domain.high < math.inf:
            wrong += [domain.high + 1.0] + ([domain.high] if not domain.high_closed else [])
        if domain.kind == "int":
            wrong += [max(domain.low, 0) + 1.5]
        wrong += [True]
    elif domain.kind == "choice":
        wrong = [f"{domain.choices[0]}x", 1.0, True]
    elif domain.kind == "bool":
        wrong = ["yes", 1, 0.0]
    else:
        wrong = [1.0, True, ""]
    if not domain.optional:
        wrong.append(None)
    return st.sampled_from(wrong)


def one_step(kind, name, part) -> None:
    """Run the built part once on random tensors; what it returns is finite (NaN-free for
    a controller's metrics)."""
    g = torch.Generator().manual_seed(0)
    if kind in ("loss", "post-update"):
        logp = torch.log(torch.rand(4, 5, generator=g) * 0.9 + 0.05).requires_grad_(True)
        old = logp.detach() + 0.3 * torch.randn(4, 5, generator=g)
        adv, mask = torch.randn(4, generator=g), (torch.rand(4, 5, generator=g) < 0.8).float()
        out = part(logp, old, adv, mask)
        if kind == "loss":
            loss_tok, metrics = out
            loss_tok.sum().backward()
            assert torch.isfinite(loss_tok).all() and torch.isfinite(logp.grad).all()
        else:
            metrics = out
        assert all(math.isfinite(v) for v in metrics.values()), metrics
    elif kind == "advantage" and ADVANTAGES.meta(name)["needs_critic"]:
        rewards, values = torch.randn(4, 5, generator=g), torch.randn(4, 5, generator=g)
        adv, returns, _ = part(rewards, values, torch.ones(4, 5))
        assert torch.isfinite(adv).all() and torch.isfinite(returns).all()
    elif kind == "correction":
        log_ratio = 0.3 * torch.randn(4, 5, generator=g)
        mask = (torch.rand(4, 5, generator=g) < 0.8).float()
        out = part(log_ratio, mask)
        assert out.mask.shape == mask.shape and torch.isfinite(out.mask).all()
        assert out.weights is None or torch.isfinite(out.weights).all()
        assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics
    elif kind == "schedule":  # a coefficient schedule: started, moved, saved and restored
        part.value = 0.1
        for observed in (0.05, 3.0, float(torch.rand(1, generator=g))):
            if hasattr(part, "applied"):
                part.update(observed)
                assert math.isfinite(part.applied())
            else:  # a step of n responses, n as validation admits it: 0.2 n < horizon
                part.update(observed, int(min(16, 4.9 * part.horizon)))
            assert math.isfinite(part.value)
        part.load_state_dict(part.state_dict())
    elif kind == "advantage":
        scores = (torch.rand(8, generator=g) < 0.5).float()
        extra = {"lengths": torch.arange(8.0) % 3 + 1} if ADVANTAGES.meta(name)["wants_lengths"] \
            else {}
        if ADVANTAGES.meta(name)["wants_paths"]:  # one softmax per position, lengths 1..5
            from lmpo.advantages import PathStats

            probs = torch.randn(8, 5, 6, generator=g).softmax(-1)
            mask = (torch.arange(5)[None] < torch.arange(8)[:, None] % 5 + 1).float()
            extra = {"paths": PathStats(probs[..., 0].log(), (probs ** 2).sum(-1), mask)}
        adv, _ = part(scores, torch.arange(8) // 4, clusters=["a"] * 4 + ["b"] * 4, **extra)
        assert torch.isfinite(adv).all()
    else:
        part.begin_batch(4)
        for t in range(3):
            part.step(torch.arange(4), torch.rand(4, generator=g), torch.rand(4, generator=g), t)
        part.end_batch(torch.rand(4, 3, generator=g), torch.full((4,), 3))
        part.observe({"tokens/generated": 12.0, "value/loss": 0.5, "reward/mean": 0.5,
                      "reward/accuracy": 0.5}, 1)  # metrics every step logs
        # no NaN (a metric may echo an infinite setting: ESPO's beta = inf never stops)
        assert not any(math.isnan(v) for v in part.metrics().values())
        part.load_state_dict(part.state_dict())


def build(kind, reg, name, hparams):
    example = reg.meta(name).get("example", {})
    if kind == "controller":
        from lmpo.rollout import build_controller

        return build_controller(name, example | hparams, total_steps=10, seed=0)
    if kind == "post-update":
        return reg.get(name, **hparams)
    return reg.get(name, **example | hparams)


@pytest.mark.parametrize("kind,name,hp", PARAMS, ids=lambda x: str(x))
@given(data=st.data())
def test_inside_its_domain_a_part_builds_and_runs_outside_it_fails_in_one_line(kind, name, hp,
                                                                               data):
    reg = REGISTRIES[kind]
    domain = reg.domains(name)[hp]
    example = reg.meta(name).get("example", {})
    value = data.draw(valid(domain) | st.just(example.get(hp, reg.hparams(name)[hp])),
                      label="valid")
    if reg.unmet_requirement(name, reg.hparams(name) | example | {hp: value}):
        with pytest.raises(ConfigError, match="needs"):  # a joint rule the part declares
            build(kind, reg, name, {hp: value})
    else:
        one_step(kind, name, build(kind, reg, name, {hp: value}))
    bad = data.draw(invalid(domain), label="invalid")
    with pytest.raises(ConfigError) as err:
        build(kind, reg, name, {hp: bad})
    assert hp in str(err.value) and "\n" not in str(err.value)
