"""Power planned before the runs: each headline claim's MDE at every look from a source
sweep's rows (the SD at its 80% upper bound), an experiment whose headline cannot reach
min_effect refused in one line before anything is written, accepted once the claim is
exploratory or the plan reaches it."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

from lmpo.errors import ConfigError
from lmpo.experiments.design.power import parse_power, sd_upper
from lmpo.experiments.design.sequential import nominal
from lmpo.experiments.design.spec import load_experiment
from lmpo.experiments.report.readings import seed_values
from lmpo.experiments.report.write import collect
from lmpo.experiments.run.power_plan import plan_power
from lmpo.experiments.run.sweep import plan
from lmpo.experiments.stats.kinds import claim_kind

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "experiments/results/real_cegppo4/sweep"


@pytest.fixture(scope="module")
def source():
    exp = load_experiment(str(ROOT / "experiments/real_cegppo4.yaml"))
    exp.power = {"source": str(SOURCE), "arms": {}}
    return exp, collect(SOURCE)


def test_the_sd_bound_is_the_chi_square_upper_limit():
    n, sd = 10, 0.05
    assert math.isclose(sd_upper(sd, n), sd * math.sqrt(9 / sps.chi2.ppf(0.2, 9)), rel_tol=1e-12)
    assert sd_upper(sd, n) > sd and sd_upper(sd, 100) < sd_upper(sd, 10)


def test_the_plan_is_the_kinds_mde_at_each_looks_level(source):
    exp, data = source
    (first,) = plan_power(exp, data=data)  # one headline claim: entropy, last 10 steps
    a, b = (seed_values(data, arm, "policy/entropy_head", "last_k", 10)
            for arm in ("cegppo", "grpo"))
    d = np.array([a[s] - b[s] for s in sorted(a)])
    assert first["n_source"] == 10 and math.isclose(first["sd"], d.std(ddof=1), rel_tol=1e-12)
    kind = claim_kind("direction")
    for look, n, alpha in zip(first["looks"], (5, 10), nominal((5, 10), 0.05), strict=True):
        assert look["n"] == n and look["alpha"] == alpha
        assert math.isclose(look["mde"], kind.mde_for("greater", sd_upper(d.std(ddof=1), 10),
                                                      n, 1 - alpha), rel_tol=1e-12)


def test_a_plan_short_of_min_effect_is_refused_and_others_run(source, tmp_path):
    exp, data = source
    assert [p["status"] for p in plan_power(exp, data=data)] == ["refused"]  # MDE 0.078 > 0.05
    with pytest.raises(ConfigError) as err:
        plan(exp, tmp_path / "sweep", jobs=1)
    assert "\n" not in str(err.value) and "exploratory: true" in str(err.value)
    assert not (tmp_path / "sweep").exists()  # refused before anything is written
    exploratory = copy.deepcopy(exp)
    exploratory.claims[0]["exploratory"] = True
    assert plan_power(exploratory, data=data)[0]["status"].startswith("exploratory")
    coarser = copy.deepcopy(exp)
    coarser.claims[0]["min_effect"] = 0.1
    assert plan_power(coarser, data=data)[0]["status"] == "planned"


def test_a_bad_power_key_fails_in_one_line():
    for bad in ("somewhere", {"sweep": "x"}, {"source": "x", "arms": [1]}):
        with pytest.raises(ConfigError, match="power must be"):
            parse_power(bad, "exp.yaml")
    assert parse_power({"source": "x"}, "e") == {"source": "x", "arms": {}}
