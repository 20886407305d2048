"""`lmpo compare` checks the whole experiment before its first run: an arm that does not
build, a tier its task lacks, a claim or frontier on a metric no run will log, a batch
larger than the pool: one line, exit 2, nothing written (and `--list` the same)."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest
import yaml

from lmpo.cli import main
from lmpo.config import load_config
from lmpo.errors import ConfigError
from lmpo.experiments.design.spec import load_experiment
from lmpo.experiments.run.upfront import check_experiment
from lmpo.losses import list_losses
from lmpo.trainer.metric_names import declared, logs
from lmpo.trainer.train_config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
CLAIM = {"kind": "direction", "metric": "eval/accuracy_trained", "arms": ["a", "b"],
         "expect": "greater", "sentence": "s"}


def write(tmp_path, arms=None, claims=(), **extra) -> Path:
    data = {"base": {"policy": "nano-chain-sum", "rollout": {"batch_size": 8}},
            "arms": arms or {"a": {"preset": "grpo"}, "b": {"preset": "cegppo"}},
            "seeds": 2, "steps": 3, "differs_in": ["loss"], "claims": list(claims)} | extra
    path = tmp_path / "exp.yaml"
    path.write_text("# test\n" + yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("arms,claims,frontier,message", [
    ({"a": {"preset": "grpo"}, "b": {"preset": "no_such_preset"}}, [], None,
     r"arm 'b'.*no_such_preset"),
    ({"a": {"preset": "grpo"}, "b": {"preset": "grpo", "overrides": {
        "rollout": {"clusters": ["t9d9"]}}}}, [], None,
     r"arm 'b': rollout.clusters \['t9d9'\] unknown for task chain_sum; tiers: t2d1"),
    (None, [CLAIM | {"metric": "eval/acuracy_trained"}], None,
     r"claims\[0\]: metric 'eval/acuracy_trained' is not logged by arm\(s\) a, b "
     r"\(did you mean 'eval/accuracy_trained'\?\)"),
    (None, [CLAIM | {"metric": "espo/stop_rate"}], None,
     r"claims\[0\]: metric 'espo/stop_rate' is not logged by arm\(s\) a, b"),
    (None, [], {"x": "kl/reff", "ys": ["eval/reward_mean"]},
     r"frontier.x: metric 'kl/reff' is not logged .*did you mean 'kl/ref'"),
    ({"a": {"preset": "grpo"}, "b": {"preset": "cegppo", "overrides": {
        "rollout": {"batch_size": 64, "pool_size": 4}}}}, [], None,
     r"rollout.batch_size 64 asks for 8 prompts a step, more than rollout.pool_size 4"),
])
def test_a_broken_experiment_is_one_line_before_anything_is_written(
        tmp_path, capsys, arms, claims, frontier, message):
    path = write(tmp_path, arms, claims, **({"frontier": frontier} if frontier else {}))
    differs = ["loss", "rollout"]
    data = yaml.safe_load(path.read_text()) | {"differs_in": differs}
    path.write_text("# test\n" + yaml.safe_dump(data, sort_keys=False))
    for extra in ([], ["--list"]):
        code = main(["compare", "--config", str(path), "--out", str(tmp_path / "out"), *extra])
        err = capsys.readouterr().err.strip()
        assert code == 2, err
        assert len(err.splitlines()) == 1 and re.search(message, err), err
        assert not (tmp_path / "out").exists()  # nothing written, not even the configs


def test_a_metric_one_arm_logs_names_only_the_other(tmp_path):
    """CE-GPPO's beta_grad_frac: the cegppo arm logs it, the grpo arm does not."""
    claim = CLAIM | {"metric": "loss/cegppo/beta_grad_frac"}
    exp = load_experiment(write(tmp_path, claims=[claim]))
    with pytest.raises(ConfigError, match=r"not logged by arm\(s\) a \("):
        check_experiment(exp.expand(), 0)


def test_every_committed_experiment_passes_the_upfront_checks():
    files = sorted(glob.glob(str(ROOT / "experiments" / "*.yaml"))
                   + glob.glob(str(ROOT / "experiments" / "pilots" / "*.yaml"))) + ["demo"]
    assert len(files) >= 15
    for f in files:
        exp = load_experiment(f)
        check_experiment(exp.expand(), exp.seeds[0])


@pytest.mark.parametrize("loss", list_losses())
def test_every_loss_declares_the_metrics_it_logs(loss):
    """The declaration reads the loss's own call: what a claim may read is what it logs."""
    cfg = load_config(TrainConfig, "grpo", [f"loss.name={loss}", "loss.hparams={}"])
    names = declared(cfg)
    assert logs(names, "loss/term_policy") and logs(names, "eval/accuracy/t3d1")
    assert not logs(names, "loss/no_such_metric") and not logs(names, "espo/stop_rate")
