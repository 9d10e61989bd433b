"""The first step after the engine waited for work (CostCoefficients.idle_wake_s): the simulator charges it to
exactly those steps, the sweep times it (gpu_engine/sweep_idle.py), `calibrate --from` reads it off a run's steps
after idle spells (planner/calibration/wake.py), and a profile carries it."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_engine.sweep_grid import Shape
from gpu_engine.sweep_idle import WARM_AFTER, idle_shapes, wake_samples
from planner.calibration.profile import Profile
from planner.calibration.wake import (
    MIN_WOKEN_STEPS,
    from_waking_arrival,
    wake_from_idle_samples,
    wake_from_steps,
    waking_delays,
    with_wake,
    woken_steps,
)
from sim.cost_coefficients import CostCoefficients
from sim.cost_model import IDLE_WAKE_AFTER_S
from sim.driver import simulate
from tests.helpers.scenarios import make_scenario

WAKE_S = 1e-3


def _spaced(rate: float, num_requests: int = 6, **scenario):
    """Short requests arriving `1 / rate` apart, each alone on the engine when the rate is low."""
    workload = {
        "num_requests": num_requests,
        "arrival": {"process": "constant", "rate": rate},
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 4},
    }
    return make_scenario(workload=workload, **scenario)


def _steps(scenario, wake_s):
    result = simulate(scenario, CostCoefficients(idle_wake_s=wake_s), fast_forward=False)
    return result.recorder.steps.view()


def test_the_first_step_after_an_idle_spell_pays_the_wake_and_no_other_step_does():
    scenario = _spaced(rate=2.0)  # 500 ms apart: every request finds the engine idle
    plain, woken = _steps(scenario, None), _steps(scenario, WAKE_S)
    extra = woken["duration_s"] - plain["duration_s"]
    first = plain["num_prefill_tokens"] > 0
    first[0] = False  # the first request arrived at the run's start: the engine had not waited
    assert first.sum() == 5 and np.allclose(extra[first], WAKE_S) and np.all(extra[~first] == 0)
    assert np.allclose(woken["device_s"][first] - plain["device_s"][first], WAKE_S)  # the device side ran it


def test_back_to_back_work_and_short_spells_pay_no_wake():
    busy = _spaced(rate=1_000.0)  # 1 ms apart: the engine never waits as long as IDLE_WAKE_AFTER_S
    plain, woken = _steps(busy, None), _steps(busy, WAKE_S)
    assert np.array_equal(woken["duration_s"], plain["duration_s"])


def test_without_the_term_results_do_not_change():
    scenario = _spaced(rate=2.0)
    a = simulate(scenario, CostCoefficients(), fast_forward=True).recorder.steps.view()
    b = simulate(scenario, CostCoefficients(idle_wake_s=0.0), fast_forward=True).recorder.steps.view()
    assert np.array_equal(a["duration_s"], b["duration_s"])
    assert "idle_wake_s" not in CostCoefficients().to_dict()  # a profile without it reads as before


def test_a_lockstep_data_parallel_group_pays_the_wake_on_its_first_step_after_idle():
    # Every rank waited (sim/data_parallel.py): the step after the spell lasts the wake longer, whichever rank runs
    # the request and whichever runs a dummy batch; the steps that follow do not pay it.
    scenario = _spaced(
        rate=2.0,
        model="qwen3-30b-a3b",
        hardware={"gpu": "h100-sxm", "data_parallel_size": 2, "expert_parallel": True},
        engine={"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 4096},
    )
    plain, woken = _steps(scenario, None), _steps(scenario, WAKE_S)
    extra = woken["duration_s"] - plain["duration_s"]
    first = plain["num_prefill_tokens"] > 0
    first[0] = False
    assert first.sum() == 5 and np.allclose(extra[first], WAKE_S) and np.all(extra[~first] == 0)


def test_woken_steps_are_those_after_a_gap_of_the_threshold_or_more():
    start = np.array([0.0, 0.010, 0.020, 0.020 + 0.010 + 2 * IDLE_WAKE_AFTER_S, 0.1])
    duration = np.array([0.010, 0.010, 0.010, 0.001, 0.001])
    assert woken_steps({"start_s": start, "duration_s": duration}).tolist() == [False, False, False, True, True]
    assert woken_steps({"start_s": start + 0.5, "duration_s": duration})[0]  # the first request came late


def test_the_wake_is_the_median_excess_with_its_error_and_never_negative():
    rng = np.random.default_rng(0)
    price = np.full(200, 2e-3)
    measured = price + WAKE_S + rng.normal(0, 1e-4, 200)
    fit = wake_from_steps(measured, price)
    assert abs(fit.seconds - WAKE_S) < 3 * fit.std and 0 < fit.std < 2e-5 and fit.samples == 200
    assert wake_from_steps(measured[: MIN_WOKEN_STEPS - 1], price[: MIN_WOKEN_STEPS - 1]) is None
    assert wake_from_steps(price - 1e-4, price).seconds == 0.0  # faster than priced: noise, not a wake
    sweep = wake_from_idle_samples(np.array([3e-3, 3.1e-3, 2.9e-3]), np.array([2e-3] * 3), 0.05, 3)
    assert sweep.seconds == pytest.approx(WAKE_S) and "3 steps of 3 shapes timed after 50 ms idle" in sweep.lines()[0]


def test_wake_samples_time_the_call_after_the_spell_and_a_warm_one_later():
    state = {"cold": False, "calls": 0}

    def sleep(seconds):
        assert seconds == 0.05
        state["cold"] = True

    def timer():
        state["calls"] += 1
        seconds = 2e-3 if state["cold"] else 1e-3
        state["cold"] = False
        return seconds

    cold, warm = wake_samples([timer, timer], idle_s=0.05, repeats=3, sleep=sleep)
    assert cold.tolist() == [2e-3] * 6 and warm.tolist() == [1e-3] * 6
    assert state["calls"] == 6 * (2 + WARM_AFTER)  # a warm-up before each spell, then WARM_AFTER calls after


def test_a_cold_call_counts_the_time_its_sleep_overshot():
    """A live engine sleeps until the next arrival, and the request waits for the overshoot too: a sleep that runs
    3 ms past its spell adds them to the cold call, not to the warm one."""
    import time

    def sleep(seconds):
        time.sleep(seconds + 3e-3)

    cold, warm = wake_samples([lambda: 1e-3], idle_s=0.01, repeats=2, sleep=sleep)
    assert np.all(cold >= 1e-3 + 3e-3) and np.all(cold < 1e-3 + 0.05) and warm.tolist() == [1e-3, 1e-3]


def test_a_woken_step_is_timed_from_the_arrival_that_woke_the_engine():
    # three steps: the run's first (0.1 s after its start), one back to back, one after an idle spell
    rows = {"start_s": np.array([0.1, 0.1021, 0.2]), "duration_s": np.array([0.002, 0.002, 0.003])}
    arrivals = np.array([0.1004, 0.0998, 0.1010, 0.1995])  # any order; the second and fourth woke the engine
    assert woken_steps(rows).tolist() == [True, False, True]
    assert waking_delays(rows, arrivals) == pytest.approx([2e-4, 5e-4])
    assert from_waking_arrival(rows, arrivals) == pytest.approx([0.0022, 0.002, 0.0035])
    assert from_waking_arrival(rows, None).tolist() == rows["duration_s"].tolist()  # no requests.csv: as timed
    # an arrival after the step started cannot have woken it: no wait
    assert waking_delays({"start_s": np.array([0.1]), "duration_s": np.array([0.002])}, np.array([0.15])) == [0.0]


def test_the_wake_from_steps_counts_each_steps_wait_since_its_waking_arrival():
    price = np.full(8, 2e-3)
    measured = price + 1e-3
    assert wake_from_steps(measured, price).seconds == pytest.approx(1e-3)
    with_waits = wake_from_steps(measured, price, np.full(8, 2e-4))
    assert with_waits.seconds == pytest.approx(1.2e-3) and "from their waking arrival" in with_waits.how


def test_idle_shapes_take_the_first_of_each_class():
    grid = [
        Shape(num_decode=1, decode_context=16),
        Shape(num_prefill=1, chunk=32),
        Shape(num_decode=2, decode_context=16),
    ]
    grid += [Shape(num_decode=1, decode_context=16, num_prefill=1, chunk=8), Shape(num_prefill=1, chunk=64)]
    assert idle_shapes(grid, 1) == [grid[0], grid[1], grid[3]]
    assert len(idle_shapes(grid, 2)) == 5


def test_a_profile_carries_the_wake_and_its_std_and_a_new_id():
    profile = Profile(
        id="old", created="2026-12-06T00:00:00Z", source="live-runs", device={"name": "cpu", "kind": "cpu"},
        model="tiny-llama", dtype="float32", tensor_parallel_size=1, coefficients={"flops_efficiency": 0.3},
        uncertainty={"flops_efficiency": 0.01}, engine={}, fit={}, rows=None, provenance="test",
    )  # fmt: skip
    fit = wake_from_steps(np.full(10, 3e-3), np.full(10, 2e-3))
    changed = with_wake(profile, fit)
    assert changed.coefficients == {"flops_efficiency": 0.3, "idle_wake_s": pytest.approx(WAKE_S)}
    assert changed.uncertainty["idle_wake_s"] == 0.0 and changed.id != "old"
    assert changed.cost_coefficients().idle_wake_s == pytest.approx(WAKE_S)
    assert with_wake(profile, None) is profile
