"""Each of the five methods names its ablated twin (the same run with only its own mechanism
removed) and its own readings, as registry metadata; the twin builds as a same-batch
comparator of the method's preset and differs from it in the mechanism alone; DRPO's
readings equal a float64 computation and say how far its penalty can act."""

from __future__ import annotations

import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lmpo.advantages import advantage_meta, list_advantages
from lmpo.config import load_config
from lmpo.losses import get_loss, list_losses, loss_meta
from lmpo.rollout import CONTROLLERS, list_controllers
from lmpo.trainer.comparators import build_comparators, twins
from lmpo.trainer.train_config import TrainConfig
from tests.hand_sweep import hand_written_sweep

D = torch.float64
# (preset, the part that carries the mechanism, the twin's change)
METHODS = {"drpo": ("drpo", "loss", {"name": "importance_sampling"}),
           "cegppo": ("cegppo", "loss", {"name": "cegppo",
                                         "hparams": {"beta1": 0.0, "beta2": 0.0}}),
           "output_reset": ("grpo_or", "loss", {"name": "importance_sampling"}),
           "ebpo": ("ebpo", "advantage", {"name": "grpo"}),
           "espo": ("espo", "controller", {"name": "none"})}


def declared_twins() -> dict[str, dict]:
    metas = [(n, loss_meta(n)) for n in list_losses()] + \
        [(n, advantage_meta(n)) for n in list_advantages()] + \
        [(n, CONTROLLERS.meta(n)) for n in list_controllers()]
    return {n: m["twin"] for n, m in metas if m["twin"]}


def test_the_five_methods_and_only_they_declare_a_twin_and_readings():
    assert sorted(declared_twins()) == sorted(METHODS)
    for name, (_, part, change) in METHODS.items():
        assert declared_twins()[name] == {part: change}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_twin_builds_as_a_comparator_and_removes_only_the_mechanism(method):
    preset, part, change = METHODS[method]
    cfg = load_config(TrainConfig, preset, ["policy=unused"])
    assert getattr(cfg, part).name == method
    (spec,) = twins(cfg).values()
    assert set(spec) == {part} and spec[part]["name"] == change["name"]
    if part == "loss":  # the run's aggregation, and its other hyper-parameters where the
        # twin is the same loss
        assert spec["loss"]["agg"] == (cfg.loss.agg or loss_meta(method)["default_agg"])
        if change["name"] == method:
            assert spec["loss"]["hparams"] == cfg.loss.hparams | change["hparams"]
    twin_cfg = load_config(TrainConfig, preset, ["policy=unused"])
    twin_cfg.log.comparators = {"twin": spec}
    (comp,) = build_comparators(twin_cfg)
    assert comp.name == "twin"
    meta = {"loss": loss_meta, "advantage": advantage_meta, "controller": CONTROLLERS.meta}
    readings = meta[part](method)["readings"]
    assert readings and set(readings) <= set(meta[part](method)["diagnostics"])


def drpo_reference(lp, olp, a, delta):
    """(mean |w - 1|, max |w - 1|, penalty share) written token by token."""
    devs, pen, pg = [], 0.0, 0.0
    for x, y, adv in zip(lp, olp, a, strict=True):
        q, r = math.exp(y), math.exp(x - y)
        moved = q * (r - 1)
        devs.append(abs(moved) / delta)
        pen += (abs(adv) * q * (r - 1) * r / delta) ** 2
        pg += (r * adv) ** 2
    return sum(devs) / len(devs), max(devs), math.sqrt(pen) / math.sqrt(pg)


@pytest.mark.parametrize("delta", [12.5, 0.5, 0.05])
def test_drpos_readings_equal_a_float64_reference(delta):
    g = torch.Generator().manual_seed(3)
    old = torch.log(torch.rand(4, 6, generator=g, dtype=D) * 0.9 + 0.05)
    logp = (old + 0.4 * torch.randn(4, 6, generator=g, dtype=D)).clamp(max=-1e-3)
    adv = torch.tensor([1.0, -0.5, 2.0, -1.5], dtype=D)
    mask = torch.ones(4, 6, dtype=D)
    _, m = get_loss("drpo", delta=delta)(logp, old, adv, mask)
    want = drpo_reference(logp.flatten().tolist(), old.flatten().tolist(),
                          adv[:, None].expand(4, 6).flatten().tolist(), delta)
    assert (m["drpo/weight_dev_mean"], m["drpo/weight_dev_max"], m["drpo/penalty_share"]) == \
        pytest.approx(want, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(delta=st.floats(0.05, 50.0), seed=st.integers(0, 10_000))
def test_drpos_weight_moves_at_most_one_over_delta(delta, seed):
    """|w - 1| = |p - q| / delta <= 1 / delta: at the published delta 12.5 no token's
    weight leaves [0.92, 1.08], whatever the policies."""
    g = torch.Generator().manual_seed(seed)
    old = torch.log(torch.rand(3, 5, generator=g, dtype=D).clamp(min=1e-6))
    logp = torch.log(torch.rand(3, 5, generator=g, dtype=D).clamp(min=1e-6))
    adv = torch.randn(3, generator=g, dtype=D)
    _, m = get_loss("drpo", delta=delta)(logp, old, adv, torch.ones(3, 5, dtype=D))
    assert m["drpo/weight_dev_max"] <= 1 / delta + 1e-12


# ---------------------------------------------------------------- "mechanism inert"
def test_inert_comes_before_every_label_but_insufficient_seeds():
    from lmpo.experiments.stats.labels import judge

    claim = {"kind": "direction", "expect": "greater", "min_effect": 0.01}
    a, b = [0.9, 0.95, 0.92, 0.97, 0.93], [0.5, 0.52, 0.49, 0.51, 0.5]
    assert judge(claim, a, b)["verdict"] == "holds"
    out = judge(claim, a, b, inert="twin below the floor", confounded="effective: x")
    assert (out["verdict"], out["first"], out["reason"]) == (
        "mechanism inert", "holds", "twin below the floor")
    assert judge(claim, a[:2], b[:2], inert="twin")["verdict"] == "insufficient seeds"


def twin_sweep(tmp_path, policy, distance: float):
    """A `twins: true` compare directory with hand-written rows: DRPO (and its twin IS-PG)
    well above GRPO on every seed, DRPO's update `distance` from its twin and 0.05 from
    GRPO's parts."""
    data = {"base": {"policy": str(policy), "log": {"tensorboard": False}},
            "arms": {"drpo": {"preset": "drpo"}, "grpo": {"preset": "grpo"}, "is_pg": IS_PG},
            "seeds": 5, "steps": 2, "differs_in": ["loss", "advantage"], "twins": True,
            "claims": [{"kind": "direction", "metric": "reward/mean", "arms": ["drpo", "grpo"],
                        "expect": "greater", "sentence": "DRPO beats GRPO",
                        "min_effect": 0.05, "twin": "is_pg"}]}

    def rows(run):
        value = {"drpo": 0.8, "is_pg": 0.8, "grpo": 0.5}[run.arm] + 0.01 * run.seed
        shadow = {"shadow/twin_drpo/weight_tv": distance, "shadow/grpo/weight_tv": 0.05,
                  "shadow/is_pg/weight_tv": distance} if run.arm == "drpo" else {}
        return [{"step": t, "reward/mean": value} | shadow for t in (1, 2)]

    return hand_written_sweep(tmp_path, data, rows)


@pytest.mark.parametrize("distance,label", [(0.0002, "mechanism inert"), (0.02, "holds")])
def test_a_method_within_the_floor_of_its_twin_reads_mechanism_inert(
        tmp_path, tiny_policy_dir, distance, label):
    import yaml

    from lmpo.experiments.report.write import report

    out = twin_sweep(tmp_path, tiny_policy_dir, distance)
    config = yaml.safe_load((out / "configs" / "drpo-seed0.yaml").read_text())
    assert config["log"]["comparators"]["twin_drpo"]["loss"]["name"] == "importance_sampling"
    assert "twin_grpo" not in yaml.safe_load(
        (out / "configs" / "grpo-seed0.yaml").read_text())["log"]["comparators"]
    md = report(out, tmp_path / "report.md")
    claim, mechanism, shared = json.loads(md.with_suffix(".json").read_text())["claims"]
    assert claim["verdict"] == label and claim["twin"]["value"] == pytest.approx(distance)
    assert (mechanism["role"], mechanism["arms"], shared["arms"]) == (
        "descriptive", ["drpo", "is_pg"], ["is_pg", "grpo"])
    assert mechanism["effect"] == pytest.approx(0.0) and shared["effect"] == pytest.approx(0.3)
    assert (mechanism["verdict"], shared["verdict"]) == (
        "mechanism inert" if label == "mechanism inert" else "negligible", "holds")
    # the headline's own label stands, qualified: its gain is the shared part's
    assert claim.get("via") == (None if label == "mechanism inert" else "the shared part")
    if label == "holds":
        assert "**holds** via the shared part" in md.read_text()
    assert claim["engagement"]["value"] == pytest.approx(0.05)  # engaged against GRPO
    assert "the method's twin (twin_drpo): weight_tv" in md.read_text()


def test_without_twins_an_experiment_logs_none_and_reads_as_before(tmp_path):
    from lmpo.experiments.design.comparators import twin_log
    from lmpo.experiments.design.spec import load_experiment

    path = tmp_path / "exp.yaml"
    path.write_text("arms: {drpo: {preset: drpo}, grpo: {preset: grpo}}\nsteps: 2\n"
                    "differs_in: [loss]\n")
    exp = load_experiment(path)
    assert exp.twins is False and "twins" not in exp.to_dict()
    cfg = load_config(TrainConfig, "drpo", ["policy=unused"])
    assert list(twin_log(cfg)) == ["twin_drpo"]
    path.write_text(path.read_text() + "twins: yes please\n")
    with pytest.raises(Exception, match="twins must be true or false"):
        load_experiment(path)


# ---------------------------------------------------------------- decomposition
def decomposed(tmp_path, policy, twin_arm: dict | None, twin_name: str | None = "is_pg"):
    import yaml

    from lmpo.experiments.design.spec import load_experiment

    arms = {"drpo": {"preset": "drpo"}, "grpo": {"preset": "grpo"}}
    claim = {"kind": "direction", "metric": "reward/mean", "arms": ["drpo", "grpo"],
             "expect": "greater", "sentence": "DRPO beats GRPO", "min_effect": 0.05}
    if twin_arm is not None:
        arms[twin_name] = twin_arm
        claim["twin"] = twin_name
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "base": {"policy": str(policy)}, "arms": arms, "seeds": 3, "steps": 2,
        "differs_in": ["loss", "advantage"], "twins": True, "claims": [claim]},
        sort_keys=False))
    return load_experiment(path)


IS_PG = {"preset": "drpo", "overrides": {"loss": {"name": "importance_sampling",
                                                  "agg": "seq-mean-token-sum-norm"}}}


def test_a_claim_beyond_its_mechanism_needs_its_twin_arm(tmp_path, tiny_policy_dir):
    """DRPO's preset differs from GRPO's in its loss (no clip and a penalty), its estimator
    and its aggregation: `drpo > grpo` must name DRPO's twin (the same arm with the
    unclipped importance-sampled loss), and that arm must be exactly that."""
    from lmpo.experiments.run.upfront import check_experiment

    with pytest.raises(Exception, match=r"claims\[0\]: drpo differs from grpo in more than "
                                        r"its method's mechanism \(advantage, loss\); add"):
        check_experiment(decomposed(tmp_path, tiny_policy_dir, None).expand(), 0)
    with pytest.raises(Exception, match="twin 'is_pg' is not drpo with only its mechanism "
                                        r"removed: it differs from that in advantage, loss"):
        check_experiment(decomposed(tmp_path, tiny_policy_dir, {"preset": "grpo"}).expand(), 0)
    flat = decomposed(tmp_path, tiny_policy_dir, IS_PG).expand()
    check_experiment(flat, 0)
    rows = [(c["role"], c.get("split"), c["arms"]) for c in flat.claims]
    assert rows == [("headline", None, ["drpo", "grpo"]),
                    ("descriptive", "mechanism", ["drpo", "is_pg"]),
                    ("descriptive", "shared", ["is_pg", "grpo"])]
    assert flat.claims[1]["sentence"].endswith("(mechanism part: drpo - is_pg)")


def test_a_claim_of_a_method_against_its_twin_needs_no_split(tmp_path, tiny_policy_dir):
    import yaml

    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.run.upfront import check_experiment

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({
        "base": {"policy": str(tiny_policy_dir)},
        "arms": {"drpo": {"preset": "drpo"}, "is_pg": IS_PG}, "seeds": 3, "steps": 2,
        "differs_in": ["loss"], "twins": True,
        "claims": [{"kind": "direction", "metric": "reward/mean", "arms": ["drpo", "is_pg"],
                    "expect": "greater", "sentence": "the penalty helps"}]}))
    check_experiment(load_experiment(path).expand(), 0)


def test_a_trend_takes_no_twin_and_is_left_to_its_levels(tmp_path):
    from lmpo.errors import ConfigError
    from lmpo.experiments.design.claims import check_claim

    claim = {"kind": "dose_response", "metric": "m", "arms": ["drpo", "grpo"],
             "expect": "greater", "sentence": "s", "twin": "is_pg"}
    with pytest.raises(ConfigError, match="twin names a third arm"):
        check_claim(claim, ["drpo", "grpo", "is_pg"], "claims[0]",
                    {"levels": {"L0": {}, "L1": {}}})
