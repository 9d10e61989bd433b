"""A profile's correlations and the agreement of two profiles by their predicted step times
(planner/calibration/agreement.py): what the live round trip of `calibrate --from-vllm` judges with."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers.calibration import TRUTH, synthetic_rows
from helpers.scenarios import make_scenario

from planner.calibration.agreement import agreement_lines, predicted_time
from planner.calibration.fitting import BOUNDS, fit_steps, measured_scenario, predict_rows
from planner.calibration.profile import covariance, profile_from_fit, save_profile
from planner.calibration.profile_loader import load_profile
from sim.engine_facts import EngineFacts

DEVICE = {"name": "cpu", "kind": "cpu", "gpu": "cpu"}


def _profile(scenario, seed: int, **changes):
    rows = synthetic_rows(scenario, dataclasses.replace(TRUTH, **changes), noise=0.03, seed=seed)
    return profile_from_fit(scenario, fit_steps(scenario, rows), "live-runs", {}, None, "test", DEVICE), rows


def _timed(rows: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rows as a run's steps.csv has them: back to back from the run's start (no idle spell)."""
    return rows | {"start_s": np.concatenate([[0.0], np.cumsum(rows["duration_s"])[:-1]])}


def test_a_fit_writes_its_correlations_and_they_load_back(tmp_path):
    profile, _ = _profile(make_scenario(), 0)
    # the per-step and per-row host overheads share every row: their fits trade against each other
    r = profile.correlation["step_overhead_s"]["per_row_overhead_s"]
    assert -1 <= r < -0.3
    assert load_profile(save_profile(profile, tmp_path / "p.yaml")).correlation == profile.correlation
    c = covariance(profile, ["step_overhead_s", "per_row_overhead_s"])
    std = [profile.uncertainty["step_overhead_s"], profile.uncertainty["per_row_overhead_s"]]
    assert c[0, 1] == pytest.approx(r * std[0] * std[1]) and c[0, 0] == pytest.approx(std[0] ** 2)


def test_a_predicted_times_std_is_that_of_the_coefficients_drawn_from_the_covariance():
    """The delta method against brute force: coefficients drawn from the profile's covariance, the steps priced by
    each draw; the spread of the mean price is the std predicted_time gives, and without the correlations it is not."""
    scenario = make_scenario()
    profile, rows = _profile(scenario, 0)
    priced = predicted_time(profile, scenario, rows, woken=False)
    names = sorted(profile.uncertainty)
    rng = np.random.default_rng(0)
    draws = rng.multivariate_normal([profile.coefficients[n] for n in names], covariance(profile, names), 2000)
    facts = EngineFacts.of(measured_scenario(scenario))
    base = profile.cost_coefficients()
    means = []
    for draw in draws:
        values = {n: float(np.clip(v, BOUNDS[n][0], BOUNDS[n][1])) for n, v in zip(names, draw)}
        means.append(np.mean(predict_rows(facts, dataclasses.replace(base, **values), rows, serial=True)))
    assert priced.std == pytest.approx(np.std(means), rel=0.1)
    assert priced.seconds == pytest.approx(np.mean(means), rel=0.01)
    uncorrelated = predicted_time(dataclasses.replace(profile, correlation={}), scenario, rows, woken=False)
    assert abs(uncorrelated.std / priced.std - 1) > 0.1  # the correlations matter here
    assert priced.unpriced == ()
    # fit_steps does not fit the wake (from_runs measures it apart): a step after idle says its price has no std for it
    assert predicted_time(profile, scenario, rows, woken=True).unpriced == ("idle_wake_s",)


def test_two_fits_of_one_engine_agree_about_as_often_as_their_stds_say_and_a_slower_engines_never():
    """Pairs of fits to the same engine's steps (other noise draws): each kind of step lands within 2 combined stds
    about 95% of the time, so most pairs agree on both kinds (about 90%); a profile of an engine with a 20% slower
    memory does not agree with any of them."""
    scenario = make_scenario()
    runs = [_timed(_profile(scenario, 99)[1])]
    agreed, slower_agreed = 0, 0
    slower, _ = _profile(scenario, 98, bandwidth_efficiency=TRUTH.bandwidth_efficiency * 0.8)
    for pair in range(10):
        first, second = _profile(scenario, 2 * pair)[0], _profile(scenario, 2 * pair + 1)[0]
        lines, agree = agreement_lines(("a", first), ("b", second), scenario, runs, [None], "the synthetic steps")
        agreed += agree
        assert lines[-1].endswith("combined standard errors on every kind of step")
        lines, agree = agreement_lines(("a", first), ("slower", slower), scenario, runs, [None], "the synthetic steps")
        slower_agreed += agree
        decode = next(line for line in lines if line.strip().startswith("decode steps"))
        assert float(decode.split()[-1]) > 5 and "DO NOT agree" in lines[-1]
    assert agreed >= 7 and slower_agreed == 0


def test_steps_after_idle_are_told_within_each_run_and_pay_the_wake():
    scenario = make_scenario()
    profile, rows = _profile(scenario, 0)
    profile = dataclasses.replace(profile, coefficients=profile.coefficients | {"idle_wake_s": 2e-3})
    timed = _timed(rows)
    idle = timed | {"start_s": timed["start_s"] + np.where(np.arange(len(rows["duration_s"])) >= 5, 1.0, 0.0)}
    lines, _ = agreement_lines(("a", profile), ("b", profile), scenario, [timed, idle], [None, None], "two runs")
    # each run's first step starts at its own 0 (not after idle); the second run idles once, before its sixth step
    assert any(line.strip().startswith("steps after idle (1)") for line in lines)
    woken = {k: v[5:6] for k, v in rows.items()}
    with_wake = predicted_time(profile, scenario, woken, woken=True).seconds
    without = predicted_time(profile, scenario, woken, woken=False).seconds
    assert with_wake - without == pytest.approx(2e-3)
