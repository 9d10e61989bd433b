"""steps.csv written by a child process (planner.outputs.steps_writer): the same bytes as written in-process, errors come
back to the parent, and a writer whose run failed exits."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT

from planner.outputs.plot_workers import BACKGROUND_MIN_REQUESTS
from planner.outputs.results import StepsCsv
from planner.outputs.steps_writer import StepsCsvWriter, steps_csv_for
from planner.scenario.load import load_scenario
from sim.driver import simulate

# Its module-scoped fixture is computed once per pytest-xdist worker: every test of the module on one worker.
pytestmark = pytest.mark.xdist_group("test_steps_writer")

A10 = ROOT / "scenarios" / "a10_qwen7b.yaml"


@pytest.fixture(scope="module")
def chunks():
    """The step rows of a run, in the chunks the recorder hands over (small ones: many of them)."""
    import sim.metrics

    got = []
    chunk_rows = sim.metrics.STEP_CHUNK_ROWS
    sim.metrics.STEP_CHUNK_ROWS = 64
    try:
        result = simulate(
            load_scenario(A10),
            record_steps=True,
            steps_sink=lambda rows: got.append({name: column.copy() for name, column in rows.items()}),
        )
        result.recorder.step_rows()  # the last chunk
    finally:
        sim.metrics.STEP_CHUNK_ROWS = chunk_rows
    assert len(got) > 3
    return got


@pytest.mark.parametrize("all_steps", [False, True], ids=["merged", "all_steps"])
def test_the_writer_writes_the_same_file_as_writing_in_process(tmp_path, chunks, all_steps):
    here, there = StepsCsv(tmp_path / "here.csv", all_steps), StepsCsvWriter(tmp_path / "there.csv", all_steps)
    for rows in chunks:
        here(rows)
        there(rows)
    here.close()
    there.close()
    assert (tmp_path / "here.csv").read_bytes() == (tmp_path / "there.csv").read_bytes()
    assert there.process.exitcode == 0


def test_a_writers_failure_comes_back_to_the_parent(tmp_path, chunks):
    (tmp_path / "a_file").write_text("")
    writer = StepsCsvWriter(tmp_path / "a_file" / "steps.csv")  # a file where the folder should be
    with pytest.raises(OSError):
        for rows in chunks:  # more chunks than the queue holds: the parent must not wait forever
            writer(rows)
        writer.close()
    assert not writer.process.is_alive()


def test_a_writer_whose_run_failed_exits(tmp_path, chunks):
    writer = StepsCsvWriter(tmp_path / "steps.csv")
    writer(chunks[0])
    writer.abort()
    assert writer.process.exitcode is not None


def test_short_runs_write_in_process(tmp_path):
    assert isinstance(steps_csv_for(tmp_path / "s.csv", False, BACKGROUND_MIN_REQUESTS - 1), StepsCsv)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a process's state from /proc")
def test_a_writer_whose_parent_was_killed_exits(tmp_path):
    import subprocess
    import sys
    import time

    script = (
        "import os, signal, sys; from pathlib import Path; from planner.outputs.steps_writer import StepsCsvWriter; "
        f"w = StepsCsvWriter(Path({str(tmp_path / 'steps.csv')!r})); print(w.process.pid, flush=True); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    status = Path(f"/proc/{int(out.stdout)}/status")
    deadline = time.monotonic() + 30
    while status.exists() and "zombie" not in status.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not status.exists() or "zombie" in status.read_text()  # it exited (a zombie only waits for init)
