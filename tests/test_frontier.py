"""The matched-KL frontier: curves, interpolation, the reach, peaks, and the block's errors."""

import math

import pytest

from lmpo.errors import ConfigError
from lmpo.experiments.design.frontier import (
    check_frontier,
    curve,
    frontier_table,
    pair_differences,
    read_at,
)
from lmpo.experiments.design.spec import Arm, Experiment, parse_experiment


def rows(kls, evals):
    """A run logging kl/ref at every step 1..n and eval/score at the steps in `evals`."""
    out = []
    for step, kl in enumerate(kls, start=1):
        r = {"step": step, "kl/ref": kl}
        if step in evals:
            r["eval/score"] = evals[step]
        out.append(r)
    return out


def test_curve_uses_the_window_mean_of_x_and_starts_before_training():
    r = rows([0.1, 0.3, 0.5, 0.7], {2: 1.0, 4: 3.0})
    assert curve(r, {"eval/score": 0.5}, "kl/ref", "eval/score", window=2) == [
        (0, 0.0, 0.5), (2, pytest.approx(0.2), 1.0), (4, pytest.approx(0.6), 3.0)]


def test_read_at_interpolates_at_the_first_crossing():
    pts = [(0, 0.0, 0.0), (10, 1.0, 2.0), (20, 2.0, 6.0), (30, 1.5, 100.0)]
    assert read_at(pts, 0.5) == pytest.approx(1.0)
    assert read_at(pts, 1.5) == pytest.approx(4.0)  # first crossing, not the later 1.5
    assert read_at(pts, 2.0) == pytest.approx(6.0)
    assert math.isnan(read_at(pts, 2.5))


def experiment(frontier):
    return Experiment(name="e", description="", base={}, arms=[Arm("a", "grpo"), Arm("b", "grpo")],
                      seeds=[0, 1], steps=4, differs_in=[], claims=[], frontier=frontier)


def test_table_reads_every_arm_at_levels_every_run_reaches():
    runs = {}
    for arm, slope in (("a", 1.0), ("b", 2.0)):  # b drifts twice as fast, same score per step
        for seed in (0, 1):
            kls = [slope * s for s in (1, 2, 3, 4)]
            runs[(arm, seed)] = {"finished": True, "before_row": {"eval/score": 0.0},
                                 "rows": rows(kls, {s: float(s + seed) for s in (2, 4)})}
    spec = check_frontier({"x": "kl/ref", "ys": ["eval/score"], "levels": 2, "window": 1,
                           "peak": ["eval/score"]}, "t")
    front = frontier_table({"experiment": experiment(spec), "runs": runs}, spec)
    assert front["reach"] == pytest.approx(4.0)  # arm a's largest KL
    assert front["levels"] == pytest.approx([2.0, 4.0])
    # a: KL = step, score = step + seed; b: KL = 2 step, so at KL 2 step 1 (score 1 + seed,
    # interpolated between (0, 0) and (4, 2 + seed))
    a, b = front["at"]["eval/score"]["a"], front["at"]["eval/score"]["b"]
    assert [s["mean"] for s in a] == pytest.approx([2.5, 4.5])
    assert [s["mean"] for s in b] == pytest.approx([(1.0 + 1.5) / 2, 2.5])
    peak = front["peak"]["eval/score"]["b"]
    assert peak["value"]["mean"] == pytest.approx(4.5) and peak["x"]["mean"] == pytest.approx(8.0)
    assert peak["step"]["mean"] == pytest.approx(4.0)


def test_pairs_are_differences_by_seed_with_a_paired_t_interval():
    """a - b at each level, matched by seed (b's seeds listed in another order, one seed
    of b missing), against numbers worked by hand."""
    runs = {}
    for arm, seeds, bump in (("a", (0, 1, 2), 1.0), ("b", (2, 0), 0.0)):
        for seed in seeds:  # KL = step for both; score = step + seed + bump (+ seed^2 for a)
            score = {s: s + seed + bump + (seed * seed if arm == "a" else 0) for s in (2, 4)}
            runs[(arm, seed)] = {"finished": True, "before_row": {"eval/score": 0.0},
                                 "rows": rows([1.0, 2.0, 3.0, 4.0], score)}
    spec = check_frontier({"x": "kl/ref", "ys": ["eval/score"], "levels": 2, "window": 1,
                           "pairs": [["a", "b"]]}, "t")
    front = frontier_table({"experiment": experiment(spec), "runs": runs}, spec)
    diffs = front["pairs"]["eval/score"]["a - b"]
    # seeds 0 and 2 in both: a - b = 1 + seed^2 = 1 and 5 at every level
    half = 12.706204736174707 * math.sqrt(8.0) / math.sqrt(2)  # t_{0.975, 1} sd / sqrt(n)
    for d in diffs:
        assert d["n"] == 2 and d["mean"] == pytest.approx(3.0)
        assert d["ci"] == pytest.approx([3.0 - half, 3.0 + half])


def test_pairs_at_condition_levels_pair_within_the_level():
    per_seed = {"a@L0": {0: [1.0], 1: [2.0]}, "b@L0": {0: [0.0], 1: [0.0]},
                "a@L1": {0: [5.0], 1: [5.0]}, "b@L1": {0: [1.0], 1: [1.0]}}
    out = pair_differences(per_seed, [["a", "b"]], 1)
    assert set(out) == {"a@L0 - b@L0", "a@L1 - b@L1"}
    assert out["a@L0 - b@L0"][0]["mean"] == pytest.approx(1.5)
    assert out["a@L1 - b@L1"][0]["mean"] == pytest.approx(4.0)
    assert out["a@L1 - b@L1"][0]["ci"] == pytest.approx([4.0, 4.0])  # no spread


def test_unfinished_runs_are_left_out():
    runs = {("a", 0): {"finished": False, "before_row": {}, "rows": rows([9.0], {1: 9.0})},
            ("a", 1): {"finished": True, "before_row": {}, "rows": rows([1.0, 2.0], {2: 5.0})},
            ("b", 0): {"finished": True, "before_row": {}, "rows": rows([1.0, 3.0], {2: 7.0})}}
    spec = check_frontier({"x": "kl/ref", "ys": ["eval/score"], "levels": 1, "window": 1}, "t")
    front = frontier_table({"experiment": experiment(spec), "runs": runs}, spec)
    assert front["reach"] == pytest.approx(2.0)
    assert front["at"]["eval/score"]["a"][0]["n"] == 1


@pytest.mark.parametrize("block, word", [
    ({"ys": ["eval/x"]}, "x and ys required"), ({"x": "kl/ref", "ys": "eval/x"}, "ys"),
    ({"x": "kl/ref", "ys": ["eval/x"], "levels": 0}, "levels"),
    ({"x": "kl/ref", "ys": ["eval/x"], "bins": 3}, "frontier is"),
    ({"x": "kl/ref", "ys": ["eval/x"], "pairs": [["a", "a"]]}, "pairs must be"),
    ({"x": "kl/ref", "ys": ["eval/x"], "pairs": ["a"]}, "pairs must be"),
    ({"x": "kl/ref", "ys": ["eval/x"], "pairs": [["a", "zz"]]}, "not in the experiment: zz")])
def test_malformed_blocks_fail_clearly(block, word):
    with pytest.raises(ConfigError, match=word):
        parse_experiment({"arms": {"a": {"preset": "grpo"}}, "steps": 2, "differs_in": [],
                          "frontier": block}, "e", "exp.yaml")
