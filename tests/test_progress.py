"""Progress off a terminal: plain lines at a cadence (first step, every 5% or every_s
seconds, the end) with elapsed time, ETA and the loop's fields; nothing when disabled;
and `lmpo sft` writing them into a log that is not a terminal."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from lmpo.progress import LoopProgress, duration


def test_off_a_terminal_lines_come_at_the_first_step_every_5_percent_and_the_end():
    out = io.StringIO()
    with LoopProgress("train x", "loss {loss:.2f}", 100, stream=out, terminal=False,
                      every_s=1e9, loss=float("nan")) as bar:
        for step in range(1, 101):
            bar.update(completed=step, loss=1 / step)
    lines = out.getvalue().splitlines()
    steps = [int(x.split("step ")[1].split("/")[0]) for x in lines]
    assert steps == [1, *range(6, 100, 5), 100]
    assert lines[0].startswith("train x: step 1/100 (1%), ") and "ETA " in lines[0]
    assert lines[0].endswith("loss 1.00") and lines[-1].endswith("loss 0.01")
    assert "ETA" not in lines[-1]  # nothing left


def test_a_resumed_loop_counts_its_eta_from_where_it_started_and_time_forces_a_line(
        monkeypatch):
    clock = iter([0.0, 10.0, 20.0, 80.0])
    monkeypatch.setattr("lmpo.progress.time.perf_counter", lambda: next(clock))
    out = io.StringIO()
    bar = LoopProgress("sft t", "loss {loss:.1f}", 1000, completed=500, stream=out,
                       terminal=False, every_s=30.0, loss=0.5).start()  # t = 0
    bar.update(advance=1)  # t = 10: the first step of this invocation
    bar.update(advance=1)  # t = 20: not due (1 step, 10 s)
    bar.update(advance=1)  # t = 80: 70 s since the last line
    assert out.getvalue().splitlines() == [
        "sft t: step 501/1000 (50%), 10s elapsed, ETA 1h23m, loss 0.5",
        "sft t: step 503/1000 (50%), 1m20s elapsed, ETA 3h40m, loss 0.5"]


def test_disabled_progress_prints_nothing_and_durations_read_well():
    out = io.StringIO()
    with LoopProgress("x", "", 3, stream=out, terminal=False, enabled=False) as bar:
        for _ in range(3):
            bar.update(advance=1)
    assert out.getvalue() == ""
    assert [duration(s) for s in (4.4, 187, 3725)] == ["4s", "3m07s", "1h02m"]


@pytest.mark.slow
def test_lmpo_sft_writes_progress_lines_into_a_log(tmp_path):
    """stdout a file, as under nohup or Slurm: the SFT loop's lines are there."""
    log = tmp_path / "sft.log"
    with log.open("w") as f:
        subprocess.run([sys.executable, "-m", "lmpo", "sft", "--out", str(tmp_path / "p"),
                        "steps=40", "batch_size=8", "eval_per_tier=4"], stdout=f,
                       stderr=subprocess.STDOUT, check=True, timeout=600)
    lines = [x for x in log.read_text().splitlines() if x.startswith("sft chain_sum: step")]
    assert lines[0].startswith("sft chain_sum: step 1/40") and "loss " in lines[0]
    assert lines[-1].startswith("sft chain_sum: step 40/40 (100%)") and len(lines) == 21
