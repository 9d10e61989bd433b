"""Command-line values that would otherwise crash a run, never end or silently mean something else: each is
refused before any work, naming the option, the bad value and what is allowed, without a traceback."""

from __future__ import annotations

import pytest
from helpers import ROOT, error_of

from planner.cli import main

CPU_TINY = str(ROOT / "scenarios" / "cpu_tiny.yaml")


@pytest.fixture
def no_simulation(monkeypatch):
    import sim.driver

    monkeypatch.setattr(sim.driver.Simulation, "run", lambda self: pytest.fail("the simulation started"))


@pytest.mark.parametrize("runs", ["0", "1", "1001", "99999999999"])
def test_simulate_intervals_need_2_to_1000_runs(runs, no_simulation, capsys):
    err = error_of(["simulate", CPU_TINY, "--intervals", runs], capsys)
    assert f"--intervals {runs}: must be a number of runs in [2, 1,000]" in err


@pytest.mark.parametrize(
    "option, value, allowed",
    [
        ("--temperature", "nan", "must be 0 (greedy) or a finite number >= 0.01"),
        ("--temperature", "inf", "must be 0 (greedy) or a finite number >= 0.01"),
        ("--temperature", "-1.0", "must be 0 (greedy) or a finite number >= 0.01"),
        ("--temperature", "1e-40", "must be 0 (greedy) or a finite number >= 0.01"),  # overflows the logits
        ("--top-p", "nan", "must be a number in (0, 1]"),
        ("--top-p", "inf", "must be a number in (0, 1]"),
        ("--top-p", "0.0", "must be a number in (0, 1]"),
        ("--top-p", "0.5", "only with --temperature > 0 (at 0, greedy, it would be ignored)"),  # was dropped
    ],
)
def test_run_refuses_sampling_values_before_the_engine_starts(option, value, allowed, monkeypatch, capsys):
    engine = pytest.importorskip("gpu_engine.engine")
    monkeypatch.setattr(engine, "run_scenario", lambda *a, **k: pytest.fail("the engine started"))
    err = error_of(["run", CPU_TINY, "--device", "cpu", option, value], capsys)
    assert f"{option} {value}: {allowed}" in err


@pytest.mark.parametrize(
    "argv, argument, allowed",
    [
        (["simulate", CPU_TINY, "--out", ""], "--out", "a folder name (. for the current folder)"),
        (["simulate", CPU_TINY, "--calibration", ""], "--calibration", "a profile file or auto"),
        (["simulate", ""], "scenario", "a scenario file"),
        (["validate", CPU_TINY, ""], "FILE", "a scenario file"),
        (["size", CPU_TINY, "--out", ""], "--out", "a folder name"),
        (["run", CPU_TINY, "--out", ""], "--out", "a folder name"),
        (["run", CPU_TINY, "--model-path", ""], "--model-path", "a folder name"),
        (["calibrate", "--device", "cpu", "--out", ""], "--out", "the profile's file name"),
        (["calibrate", "--from", ""], "--from", "a folder name"),
        (["compare", "", CPU_TINY], "a", "a run's --out folder or its summary.json"),
        (["size", CPU_TINY, "--ray", ""], "--ray", "a Ray cluster's address"),  # ran locally
    ],
)
def test_an_empty_path_is_refused_not_taken_for_the_current_folder(argv, argument, allowed, no_simulation, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "Traceback" not in err
    assert f"error: argument {argument}: '' is empty: give {allowed}" in err


def test_catalog_suggests_the_names_a_word_begins(capsys):
    err = error_of(["catalog", "gpu", "h100"], capsys)  # difflib alone said h200
    assert "no gpu named 'h100' in the catalog (did you mean h100-sxm or h100-pcie?)" in err
