"""`planner simulate --intervals N` of a fleet: N runs of the client's figures over workload seeds and coefficient
draws, where pools resting on the same provenance share one draw per run (one GPU's profile: one error)."""

from __future__ import annotations

import json

import pytest

import sim.fleet
from planner.calibration.intervals import simulate_fleet_intervals
from planner.calibration.provenance import STEP_TIME_SPREAD, Provenance
from planner.cli import main
from planner.scenario.load import load_scenario
from sim.cost_coefficients import CostCoefficients

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _drawn_per_run(monkeypatch, scenario, provenance) -> list[dict]:
    """The coefficients each run's pools got."""
    seen = []
    real = sim.fleet.simulate_fleet

    def spy(run_scenario, coefficients, record_steps=True):
        seen.append(dict(coefficients))
        return real(run_scenario, coefficients, record_steps=record_steps)

    monkeypatch.setattr(sim.fleet, "simulate_fleet", spy)
    coefficients = {pool.name: CostCoefficients() for pool in scenario.fleet.pools}
    simulate_fleet_intervals(scenario, coefficients, provenance, 3)
    return seen


def test_pools_on_one_provenance_share_a_draw_and_others_draw_their_own(monkeypatch):
    scenario = load_scenario(ROOT / "scenarios/cpu_tiny_pd.yaml", ["workload.num_requests=4"])
    spread = {STEP_TIME_SPREAD: 0.2}
    same = Provenance("calibrated", "one profile", uncertainty=spread)
    seen = _drawn_per_run(monkeypatch, scenario, {"prefill": same, "decode": same})
    assert len(seen) == 3
    assert all(run["prefill"] == run["decode"] for run in seen)
    assert len({run["prefill"].bandwidth_efficiency for run in seen}) == 3  # a draw per run
    other = Provenance("calibrated", "another profile", uncertainty=spread)
    seen = _drawn_per_run(monkeypatch, scenario, {"prefill": same, "decode": other})
    assert all(run["prefill"] != run["decode"] for run in seen)


def test_the_command_prints_and_writes_a_fleets_intervals(capsys):
    args = ["simulate", str(ROOT / "scenarios/h100_llama31_70b_pd.yaml"), "--set", "workload.num_requests=60"]
    assert main([*args, "--intervals", "4", "--json"]) == 0
    intervals = json.loads(capsys.readouterr().out)["intervals"]
    assert intervals["runs"] == intervals["runs_with_requests"] == 4 and intervals["seeds"] == [0, 3]
    p99 = intervals["metrics"]["p99_ttft_ms"]
    assert p99["low"] < p99["median"] < p99["high"]  # seeds and draws move it
    assert [s["metric"] for s in intervals["slo"]] == ["ttft_ms", "tpot_ms"]
    assert main([*args, "--intervals", "4"]) == 0
    out = capsys.readouterr().out
    assert "90% intervals over 4 runs" in out
    # both pools rest on the H100's tp4 profile: one draw, named once
    assert out.count("calibrated (public profile") == 1 and "h100-sxm) (pools prefill, decode)'s uncertainty" in out


@pytest.mark.parametrize("runs", ["1", "100000"])
def test_a_fleet_takes_the_same_number_of_runs_as_one_pool(capsys, runs):
    assert main(["simulate", str(ROOT / "scenarios/cpu_tiny_pd.yaml"), "--intervals", runs]) == 2
    assert f"--intervals {runs}: must be a number of runs in" in capsys.readouterr().err
