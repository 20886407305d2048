"""experiments/or_displacement_lengths.py: the per-sequence displacement ratio splits
exactly into its per-token and length factors, and the committed result is what the
committed runs give."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "experiments/results/output_reset_long4/sweep"


def script():
    spec = importlib.util.spec_from_file_location(
        "or_lengths", ROOT / "experiments/or_displacement_lengths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(path: Path, per_token: float, lengths: list[float]) -> None:
    path.mkdir(parents=True)
    rows = [{"step": t + 1, "diag/displacement_after": per_token, "response/length_mean": n,
             "diag/displacement_seq_after": per_token * n} for t, n in enumerate(lengths)]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_ratio_splits_into_per_token_and_length(tmp_path):
    """Arm a moves a token 3x as far on responses 2x as long: 6x per sequence."""
    mod = script()
    for s in range(3):
        lengths = [10.0 + (t % 7) + s for t in range(40)]
        write_run(tmp_path / "a" / f"seed{s}", 0.03, [2 * n for n in lengths])
        write_run(tmp_path / "b" / f"seed{s}", 0.01, lengths)
    out = mod.pair_breakdown(tmp_path, "a", "b")
    assert out["per_sequence_ratio"]["mean"] == pytest.approx(6.0)
    assert out["per_token_ratio"]["mean"] == pytest.approx(3.0)
    assert out["length_ratio"]["mean"] == pytest.approx(2.0)


@pytest.mark.skipif(not (SWEEP / "runs").exists(), reason="the committed runs are absent")
def test_the_committed_breakdown_is_the_committed_runs(tmp_path):
    out = tmp_path / "lengths.json"
    script().main(["--sweep", str(SWEEP), "--out", str(out)])
    committed = json.loads((SWEEP.parent / "displacement_lengths.json").read_text())
    assert json.loads(out.read_text()) == committed
