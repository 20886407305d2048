"""Mutated config and experiment files (cut short, random bytes, duplicated lines, values of
the wrong type) are either refused in one line (exit 2, nothing written) or, where the
mutation is still a valid file, used as that file: never a traceback."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lmpo.cli import main
from lmpo.config import load_config
from lmpo.errors import LmpoError
from lmpo.trainer.train_config import TrainConfig

TRAIN = """# a train config
extends: grpo
steps: 20
seed: 3
optim: {lr: 2.0e-5, minibatches: 2}
rollout:
  batch_size: 16
  group_size: 4
  max_new_tokens: 8
loss:
  name: cegppo
  hparams: {beta1: 0.5, beta2: 1.0}
log: {eval_every: 10, tensorboard: false}
"""
EXPERIMENT = """# a fuzzed experiment
base:
  rollout: {batch_size: 8, pool_size: 64}
arms:
  grpo: {preset: grpo}
  cegppo: {preset: cegppo, overrides: {loss: {hparams: {beta1: 0.5}}}}
seeds: 1
steps: 3
differs_in: [loss]
claims:
  - kind: direction
    metric: policy/entropy
    arms: [cegppo, grpo]
    expect: greater
    sentence: "s"
"""
VALUES = ["", "[", "{", "null", "true", "-1", "1e309", "nan", "[1, 2]", "{a: 1}", "'x'",
          "!!python/object:os.system", "&a 1", "*a", "0x10", "- 1", ": :", "\t"]


@st.composite
def mutated(draw, text: str) -> bytes:
    data = text.encode()
    lines = text.splitlines(keepends=True)
    kind = draw(st.sampled_from(["cut", "bytes", "duplicate", "value"]))
    if kind == "cut":
        return data[:draw(st.integers(0, len(data)))]
    if kind == "bytes":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.binary(min_size=1, max_size=8)) + data[at:]
    i = draw(st.integers(0, len(lines) - 1))
    if kind == "duplicate":
        return "".join(lines[:i + 1] + [lines[i]] + lines[i + 1:]).encode()
    keyed = [j for j, line in enumerate(lines) if re.match(r"\s*[\w-]+:", line)]
    j = draw(st.sampled_from(keyed))
    key = lines[j].split(":", 1)[0]
    return "".join(lines[:j] + [f"{key}: {draw(st.sampled_from(VALUES))}\n"]
                   + lines[j + 1:]).encode()


FUZZ = settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(content=mutated(TRAIN))
def test_a_mutated_train_config_is_used_or_refused_in_one_line(tmp_path, content):
    path = tmp_path / "train.yaml"
    path.write_bytes(content)
    try:
        cfg = load_config(TrainConfig, str(path))
    except LmpoError as exc:
        assert str(exc).strip() and "\n" not in str(exc)
        return
    assert isinstance(cfg, TrainConfig)  # a still-valid file, built as any valid one


@FUZZ
@given(content=mutated(EXPERIMENT))
def test_a_mutated_experiment_is_listed_or_refused_in_one_line(tmp_path_factory, content):
    import contextlib
    import io

    folder = tmp_path_factory.mktemp("fuzz")
    path = folder / "exp.yaml"
    path.write_bytes(content)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        code = main(["compare", "--config", str(path), "--out", str(folder / "sweep"),
                     "--list"])
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
        assert not (folder / "sweep").exists()  # refused: nothing written
    else:  # still valid: its runs are listed, and their configs written
        assert code == 0, err.getvalue()
        listed = out.getvalue().strip().splitlines()
        assert listed and len(list((folder / "sweep" / "configs").iterdir())) == len(listed)
