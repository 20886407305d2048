"""The train config's fields declare their domains (`lmpo.domains.dom`):
every such field refuses a value outside it in one line naming the key, and accepts its
default; validation keeps only the joint rules (tests/test_trainer.py has those)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from lmpo.config import ConfigError, load_config
from lmpo.domains import parse
from lmpo.trainer.train_config import TrainConfig


def domain_fields(cls, prefix=""):
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING \
            else f.default
        if dataclasses.is_dataclass(default):
            yield from domain_fields(type(default), prefix + f.name + ".")
        elif "domain" in f.metadata:
            yield prefix + f.name, parse(f.metadata["domain"]), default


FIELDS = list(domain_fields(TrainConfig))


def outside(domain):
    if domain.kind == "choice":
        return "nope"
    if domain.low > -math.inf:
        return domain.low - 1 if domain.kind == "int" else domain.low - 0.5
    return domain.high + 1


def test_the_numeric_and_named_fields_declare_domains():
    keys = {k for k, _, _ in FIELDS}
    assert {"steps", "rollout.batch_size", "rollout.dtype", "optim.lr", "kl.kind",
            "loss.top_entropy_quantile", "lora.dropout", "device"} <= keys
    for key, domain, default in FIELDS:
        assert domain.contains(default), (key, default)


@pytest.mark.parametrize("key,domain,default", FIELDS, ids=[k for k, _, _ in FIELDS])
def test_a_value_outside_a_fields_domain_fails_in_one_line(key, domain, default,
                                                           tiny_policy_dir):
    bad = outside(domain)
    value = f"'{bad}'" if isinstance(bad, str) else bad
    with pytest.raises(ConfigError) as err:
        load_config(TrainConfig, "grpo", [f"policy={tiny_policy_dir}", f"{key}={value}"])
    msg = str(err.value)
    assert key in msg and "\n" not in msg, msg
