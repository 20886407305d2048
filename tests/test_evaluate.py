"""Evaluation: exact accuracy and partial-credit reward kept apart, per tier, trained
tiers marked, sampled mean@k, and the rows and tables built from it."""

from __future__ import annotations

import pytest

import lmpo.evaluate as ev
from lmpo.tasks import Problem, get_task


def problems():
    return [Problem("1+2=", "3", "t2d1", {"entry": {"answer": "3"}}),
            Problem("2+1=", "3", "t2d1", {"entry": {"answer": "3"}}),
            Problem("1+2+3=", "6", "t3d1", {"entry": {"answer": "6"}})]


def fake_complete(texts):
    def complete(model, tokenizer, probs, **kw):
        assert len(probs) == len(texts)
        return list(texts)
    return complete


def run(monkeypatch, texts, **kw):
    task = get_task("chain_sum")
    task.sample(1, __import__("random").Random(0), cluster="t2d1")  # scorers exist
    monkeypatch.setattr(ev, "complete", fake_complete(texts))
    return ev.evaluate(None, None, task, problems(), max_new_tokens=8, **kw)


def test_accuracy_is_exact_and_reward_keeps_partial_credit(monkeypatch):
    r = run(monkeypatch, ["3#3", "#123", "3,6#66"], trained_tiers=["t3d1"])
    t2, t3 = r["per_tier"]["t2d1"], r["per_tier"]["t3d1"]
    assert (t2["accuracy"], t2["reward"], t2["n"], t2["trained"]) == (0.5, pytest.approx(
        (1 + 1 / 3) / 2), 2, False)
    assert (t3["accuracy"], t3["reward"], t3["trained"]) == (0.0, 0.5, True)
    assert r["accuracy_mean"] == 0.25  # a mean over tiers, not over problems
    assert (r["accuracy_trained"], r["accuracy_other"]) == (0.0, 0.5)
    assert r["trained_tiers"] == ["t3d1"] and r["decoding"] == "greedy"
    row = ev.metrics_row(r)
    assert row["eval/accuracy/t2d1"] == 0.5 and row["eval/reward/t3d1"] == 0.5
    assert row["eval/accuracy_trained"] == 0.0 and "eval/acc_mean" not in row
    assert ev.result_from_row(row, r)["per_tier"] == r["per_tier"]


def test_sampled_evaluation_averages_k_completions_per_problem(monkeypatch):
    texts = ["#3", "#4", "#3", "#3", "#3", "#3", "#6", "#6", "#5"]  # 3 problems x 3 samples
    r = run(monkeypatch, texts, temperature=1.0, samples=3)
    assert r["per_tier"]["t2d1"]["accuracy"] == pytest.approx(5 / 6)
    assert r["per_tier"]["t2d1"]["n"] == 2 and r["per_tier"]["t3d1"]["accuracy"] == 2 / 3
    assert r["decoding"] == "mean@3, T=1"
    with pytest.raises(ValueError, match="1 for greedy decoding"):
        run(monkeypatch, texts, temperature=0.0, samples=3)


def test_table_says_which_column_is_which(monkeypatch):
    from rich.console import Console

    r = run(monkeypatch, ["3#3", "#123", "3,6#66"], trained_tiers=["t3d1"])
    console = Console(width=160, record=True)
    console.print(ev.accuracy_table({"before": r, "after": r}))
    text = console.export_text()
    for s in ("before accuracy", "before reward", "after accuracy", "t3d1 *", "trained",
              "other", "accuracy = exactly correct", "(greedy)"):
        assert s in text, s
