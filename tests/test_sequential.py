"""Seeds until decided (`lmpo.experiments.design.sequential`): the boundaries against a simulation
of the looks, the design's family-wise error over looks and claims, its power and seed
count against a fixed design at `max` seeds, the null label at min_effect, and
`lmpo compare` adding blocks of seeds until the headline claim is decided (runs written
by hand, no training)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import yaml
from scipy import stats as sps

from lmpo.errors import ConfigError
from lmpo.experiments.design.sequential import (
    boundaries,
    check_design,
    nominal,
    run_design,
    spent,
)
from lmpo.experiments.stats.multiplicity import holm_adjust

ALPHA = 0.05
SIZES = [5, 10, 15]


def test_one_look_is_the_fixed_test_and_the_spending_sums_to_alpha():
    assert boundaries((15,), ALPHA) == pytest.approx((sps.norm.ppf(0.975),))
    assert spent(1.0, ALPHA) == pytest.approx(ALPHA)
    c = boundaries(tuple(SIZES), ALPHA)
    assert c[0] > c[1] > c[2] > sps.norm.ppf(0.975)  # O'Brien-Fleming: strict early


def test_the_boundaries_spend_what_the_spending_function_says():
    """200,000 simulated z paths (known variance) under the null: the share crossing
    first at each look equals alpha(t_k) - alpha(t_k-1) within 4 MC sds."""
    rng = np.random.default_rng(0)
    reps, sizes = 200_000, np.array(SIZES)
    inc = rng.normal(0, 1, (reps, 3)) * np.sqrt(np.diff(sizes, prepend=0))
    z = np.cumsum(inc, axis=1) / np.sqrt(sizes)
    c = np.array(boundaries(tuple(SIZES), ALPHA))
    crossed = np.abs(z) >= c
    first = np.where(crossed.any(1), crossed.argmax(1), -1)
    want = np.diff([0.0] + [spent(n / 15, ALPHA) for n in SIZES])
    for k in range(3):
        rate = (first == k).mean()
        assert abs(rate - want[k]) <= 4 * math.sqrt(want[k] * (1 - want[k]) / reps) + 1e-5


def simulate(effects, min_effect, reps, seed):
    """(share of experiments rejecting each claim, mean seeds used, share with a false
    rejection, share labelled negligible per claim) over `reps` sequential experiments."""
    rng = np.random.default_rng(seed)
    m = len(effects)
    data = rng.normal(np.array(effects)[None, :, None], 1.0, (reps, m, SIZES[-1]))
    rejected, negligible = np.zeros(m), np.zeros(m)
    used, false = 0.0, 0
    for x in data:
        design = run_design(list(x), [min_effect] * m, SIZES)
        status = [c["status"] for c in design["claims"]]
        rejected += [s == "rejected" for s in status]
        negligible += [s == "negligible" for s in status]
        used += design["looks"][-1]["n"]
        false += any(s == "rejected" and e == 0 for s, e in zip(status, effects, strict=True))
    return rejected / reps, used / reps, false / reps, negligible / reps


@pytest.mark.parametrize("m", [1, 3])
def test_family_wise_error_over_looks_and_claims(m):
    """Every effect 0: a false rejection at any look of any claim in <= alpha + 3 MC sds of
    2,000 experiments."""
    reps = 2000
    _, _, false, _ = simulate([0.0] * m, None, reps, seed=m)
    assert false <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps), false


def test_power_against_a_fixed_design_with_fewer_seeds():
    """Three claims of effect 0.8 sd: the design rejects each at >= 0.9 x the rate of Holm
    over a fixed 15 seeds, and stops on fewer than 15 seeds on average."""
    reps, effects = 1500, [0.8, 0.8, 0.8]
    power, used, _, _ = simulate(effects, None, reps, seed=11)
    rng = np.random.default_rng(12)
    x = rng.normal(0.8, 1.0, (reps, 3, 15))
    t = x.mean(2) / (x.std(2, ddof=1) / math.sqrt(15))
    p = 2 * sps.t.sf(np.abs(t), 14)
    fixed = np.mean([np.array(holm_adjust(list(row))) <= ALPHA for row in p], axis=0)
    assert np.all(power >= 0.9 * fixed), (power, fixed)
    assert used < 15, used


def test_negligible_is_rare_at_exactly_min_effect():
    reps = 2000
    _, _, _, negligible = simulate([0.5], 0.5, reps, seed=5)
    assert negligible[0] <= ALPHA, negligible
    _, used, _, negligible = simulate([0.0], 1.0, 400, seed=6)
    assert negligible[0] > 0.5 and used < 15  # a true null of that size stops early


def test_the_design_is_checked_before_any_run():
    assert check_design({"first": 40, "start": 5, "max": 15, "step": 5}, "x")["first"] == 40
    for bad in ({"start": 5, "max": 12, "step": 5}, {"start": 2, "max": 4, "step": 2},
                {"start": 5, "max": 15}, {"start": 5, "max": 15, "step": 5, "every": 1}):
        with pytest.raises(ConfigError, match="seeds"):
            check_design(bad, "x")
    assert nominal(tuple(SIZES), ALPHA)[0] < nominal(tuple(SIZES), ALPHA)[-1] < ALPHA


NOISE = {40: 0.3, 41: -0.4, 42: 0.5, 43: -0.2, 44: 0.1, 45: -0.3, 46: 0.4, 47: 0.0, 48: -0.1}


def fake_execute(effect):
    """An `execute` that writes each pending run's rows by hand: m(a) - m(b) = effect +
    NOISE[seed]."""
    def execute(exp, runs, out, pool, live=True):
        pool.close()
        for run in runs:
            if run.status != "pending":
                continue
            value = 1.0 + (effect + NOISE[run.seed] if run.arm == "a" else 0.0)
            run.run_dir.mkdir(parents=True, exist_ok=True)
            rows = [{"step": t, "reward/mean": value} for t in (1, 2)]
            (run.run_dir / "metrics.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in rows))
            (run.run_dir / "eval.json").write_text(json.dumps({"before": {
                "per_tier": {}, "accuracy_mean": 0.1, "reward_mean": 0.1,
                "accuracy_trained": 0.1, "accuracy_other": None}}))
            run.status = "done"
    return execute


@pytest.mark.parametrize("effect,seeds,stopped", [(1.0, 6, "decided"), (0.05, 9, "max seeds")])
def test_compare_adds_blocks_until_the_headline_claim_is_decided(
        effect, seeds, stopped, tmp_path, tiny_policy_dir, monkeypatch):
    from lmpo.experiments.design.spec import load_experiment
    from lmpo.experiments.report.write import report
    from lmpo.experiments.run import sweep

    data = {"base": {"policy": str(tiny_policy_dir), "log": {"tensorboard": False}},
            "arms": {"a": {"preset": "cegppo"}, "b": {"preset": "grpo"}},
            "seeds": {"first": 40, "start": 3, "max": 9, "step": 3}, "steps": 2,
            "differs_in": ["loss"],
            "claims": [{"kind": "direction", "metric": "reward/mean", "arms": ["a", "b"],
                        "expect": "greater", "sentence": "a above b", "min_effect": 0.01}]}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setattr(sweep, "execute", fake_execute(effect))
    monkeypatch.setattr(sweep, "prebuild", lambda runs, out=None: None)
    out = tmp_path / "sweep"
    assert sweep.compare(load_experiment(path), out, live=False) == 0
    assert sorted(p.name for p in (out / "runs" / "a").iterdir()) == [
        f"seed{s}" for s in range(40, 40 + seeds)]
    assert sweep.compare(load_experiment(path), out, live=False) == 0  # resumes: no new seeds
    assert len(list((out / "runs" / "a").iterdir())) == seeds
    rep = json.loads(report(out).with_suffix(".json").read_text())
    seq = rep["setup"]["sequential"]
    assert seq["stopped"] == stopped and [x["n"] for x in seq["looks"]] == list(
        range(3, seeds + 1, 3))
    [c] = rep["claims"]
    assert c["family"] == "headline (sequential)" and c["look"] == len(seq["looks"])
    assert (c["verdict"] == "holds") == (stopped == "decided")
    assert "## Seeds until decided" in (out / "report.md").read_text()


def test_the_status_table_rereads_only_the_metrics_files_that_changed(tmp_path, monkeypatch):
    """LastRows reads a run's metrics once, then again only after the file changed."""
    from lmpo.experiments.run import dispatch

    reads = []
    real = dispatch.read_rows
    monkeypatch.setattr(dispatch, "read_rows", lambda p: reads.append(p) or real(p))
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    last = dispatch.LastRows(keep=2)
    assert last(run) == [{"step": 1}] and last(run) == [{"step": 1}] and len(reads) == 1
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 2}\n{"step": 3}\n')
    assert last(run) == [{"step": 2}, {"step": 3}] and len(reads) == 2
    assert last(tmp_path / "nothing") == []
