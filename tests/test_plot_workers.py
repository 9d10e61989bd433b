"""Plots drawn by child processes (planner.outputs.plots.workers): the same files as drawn in-process (by one process and
its forked helpers, or by spawned processes), errors come back, and processes never given a run exit."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import ROOT

from planner.outputs.plots import CDF_POINTS, PLOT_NAMES
from planner.outputs.plots.draw import write_plots
from planner.outputs.plots.workers import (
    BACKGROUND_MIN_REQUESTS,
    FORK_HELPERS,
    PlotWorkers,
    _fork,
    _helper_answer,
    figure_groups,
    idle_cpus,
    plot_workers_for,
)
from planner.scenario.load import load_scenario
from sim.driver import simulate

# Its module-scoped fixture is computed once per pytest-xdist worker: every test of the module on one worker.
pytestmark = pytest.mark.xdist_group("test_plot_workers")

A10 = ROOT / "scenarios" / "a10_qwen7b.yaml"


@pytest.fixture(scope="module")
def run():
    recorder = simulate(load_scenario(A10)).recorder
    summary = {"scenario_name": "a10_qwen7b", "mode": "simulated"}
    options = {"itl_ms": recorder.itl.sample_ms(CDF_POINTS), "num_gpu_blocks": recorder.num_gpu_blocks}
    return (recorder.requests.view(), recorder.step_rows(), summary, "a10_qwen7b (simulated)"), options


def test_the_workers_draw_the_same_files_as_drawing_in_process(tmp_path, run):
    plots, options = run
    here = write_plots(tmp_path / "here", *plots, **options)
    workers = PlotWorkers([("throughput.png",), ("latency_cdf.png", "kv_cache.png")])
    workers.send(tmp_path / "there", *plots, **options)
    run_file = workers.run_file  # the run's data, read by both processes
    there = workers.collect()
    assert run_file is not None and not run_file.exists()  # removed once they have drawn
    assert [p.name for p in there] == [p.name for p in here] == list(PLOT_NAMES)
    for a, b in zip(here, there):
        assert a.read_bytes() == b.read_bytes(), a.name


def test_a_workers_failure_comes_back_to_the_parent(tmp_path, run):
    plots, options = run
    (tmp_path / "a_file").write_text("")
    workers = PlotWorkers([("latency_cdf.png",)])
    workers.send(tmp_path / "a_file", *plots, **options)  # a file where the folder should be
    run_file = workers.run_file
    with pytest.raises(OSError):
        workers.collect()
    assert not run_file.exists()


def test_workers_never_given_a_run_exit():
    workers = PlotWorkers([("kv_cache.png",)])
    processes = [process for _, process in workers.workers]
    workers.close()
    # close() waits 5 s for each, then terminates it without waiting: on a loaded machine (a spawned process
    # still importing matplotlib at a lower priority) its exit code comes a moment later
    for process in processes:
        process.join(timeout=60)
    assert processes and all(process.exitcode is not None for process in processes)
    assert workers.workers == [] and workers.run_file is None


def test_only_long_runs_with_plots_and_a_spare_cpu_get_workers(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr("planner.outputs.plots.workers.PlotWorkers", lambda groups: started.append(groups) or "workers")
    monkeypatch.setattr("planner.outputs.plots.workers.idle_cpus", lambda: 2)
    assert plot_workers_for(BACKGROUND_MIN_REQUESTS, tmp_path) == "workers"
    assert started == [figure_groups(2)]  # two CPUs: two processes
    assert plot_workers_for(BACKGROUND_MIN_REQUESTS - 1, tmp_path) is None
    assert plot_workers_for(10**6, None) is None  # no --out, no plots
    monkeypatch.setattr("planner.outputs.plots.workers.idle_cpus", lambda: 1)
    assert plot_workers_for(10**6, tmp_path) is None  # no CPU to spare: drawn in-process


def test_a_cpu_that_other_work_keeps_busy_is_not_idle(monkeypatch):
    monkeypatch.setattr("planner.outputs.plots.workers.usable_cpus", lambda: 4)
    monkeypatch.setattr("os.getloadavg", lambda: (2.5, 0.0, 0.0), raising=False)
    assert idle_cpus() == 1
    monkeypatch.setattr("os.getloadavg", lambda: (7.0, 0.0, 0.0), raising=False)
    assert idle_cpus() == 0


def test_figures_are_dealt_out_to_at_most_one_process_each():
    assert figure_groups(0) == [] and figure_groups(-1) == []
    assert figure_groups(1) == [PLOT_NAMES]
    assert figure_groups(2) == [("latency_cdf.png",), ("throughput.png", "kv_cache.png")]  # ~1.2 s vs ~1.0 s
    assert figure_groups(16) == [(name,) for name in PLOT_NAMES]


def test_without_fork_each_group_gets_a_spawned_process_and_draws_the_same_files(tmp_path, run, monkeypatch):
    plots, options = run
    monkeypatch.setattr("planner.outputs.plots.workers.FORK_HELPERS", False)
    workers = PlotWorkers([("latency_cdf.png",), ("throughput.png", "kv_cache.png")])
    assert len(workers.workers) == 2
    workers.send(tmp_path / "spawned", *plots, **options)
    spawned = workers.collect()
    here = write_plots(tmp_path / "here", *plots, **options)
    assert [p.read_bytes() for p in spawned] == [p.read_bytes() for p in here]


@pytest.mark.skipif(not FORK_HELPERS, reason="plotting helpers are forked on Linux only")
def test_on_linux_one_process_takes_every_group():
    workers = PlotWorkers([("latency_cdf.png",), ("throughput.png",), ("kv_cache.png",)])
    assert len(workers.workers) == 1
    workers.close()


@pytest.mark.skipif(not FORK_HELPERS, reason="plotting helpers are forked on Linux only")
def test_a_forked_helpers_answer_error_and_death_come_back():
    assert _helper_answer(*_fork(lambda: [Path("a.png")])) == ("ok", [Path("a.png")])
    outcome, value = _helper_answer(*_fork(lambda: 1 / 0))
    assert outcome == "error" and "ZeroDivisionError" in value
    assert _helper_answer(*_fork(lambda: Path("/nonexistent/dir/x.png").write_bytes(b"")))[0] == "oserror"
    outcome, value = _helper_answer(*_fork(lambda: os._exit(3)))  # died before answering
    assert (outcome, value) == ("error", "a plotting helper ended with exit code 3")


def _forks_a_sleeping_helper(pids) -> None:
    """An intermediate process: it forks a helper that would sleep for a minute, says its pid, and waits."""
    import time

    pids.put(_fork(lambda: time.sleep(60))[0])
    time.sleep(60)


def _alive(pid: int) -> bool:
    """Linux's /proc: a zombie (ended, not reaped) counts as ended."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not FORK_HELPERS, reason="plotting helpers are forked on Linux only")
def test_a_helper_ends_with_the_process_that_forked_it():
    # The planner terminates a plotting process it no longer waits for (a failed run, Ctrl-C): its helpers
    # must not go on drawing into the folder.
    import multiprocessing
    import time

    context = multiprocessing.get_context("fork")
    pids = context.Queue()
    intermediate = context.Process(target=_forks_a_sleeping_helper, args=(pids,))
    intermediate.start()
    helper = pids.get(timeout=30)
    assert _alive(helper)
    intermediate.terminate()
    intermediate.join()
    deadline = time.monotonic() + 10  # without it the helper would sleep on for a minute
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(helper)
