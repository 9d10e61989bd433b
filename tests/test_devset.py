"""The development set's points as scenarios (planner/fidelity/devset.py): the engine each launch states, and
runs as long as the published ones wherever their throughput is compared; the band its intervals are judged by."""

from __future__ import annotations

import math

import pytest

from planner.fidelity.devset import MAX_BURST, POISSON_REQUESTS, load_points, scenario_mapping
from planner.fidelity.devset_summary import BAND_Z, inside_band


def _mapping(point_id: str) -> dict:
    mapping, why = scenario_mapping(next(p for p in load_points() if p["id"] == point_id))
    assert mapping is not None, why
    return mapping


def test_a_v0_launch_with_num_scheduler_steps_runs_multi_step_scheduling():
    engine = _mapping("sglang060-online-1")["engine"]  # vllm serve ... --num-scheduler-steps 10
    assert engine["num_scheduler_steps"] == 10 and engine["async_scheduling"] is False
    assert "num_scheduler_steps" not in _mapping("sglang060-online-0")["engine"]  # SGLang's own run


def test_closed_loops_and_bursts_run_every_request_sent_but_tensorrt_llms_bursts():
    loop = _mapping("dstack-dsr1-online-h200-vllm-random-c128-o800-18")["workload"]
    assert loop["num_requests"] == 500 and loop["arrival"] == {"process": "closed", "concurrency": 128}
    burst = _mapping("sglang060-offline-1")["workload"]
    assert burst["num_requests"] == 5000 and burst["arrival"]["concurrency"] == 5000
    trt = next(p for p in load_points() if p["engine"] == "tensorrt-llm" and p["num_requests"] > MAX_BURST)
    assert _mapping(trt["id"])["workload"]["num_requests"] == MAX_BURST
    poisson = _mapping("sglang060-online-3")["workload"]  # 2400 sent at 8 req/s: medians of a steady state
    assert poisson["num_requests"] == POISSON_REQUESTS and poisson["arrival"]["process"] == "poisson"


# Twice or half the prediction is log 2 = 0.693 away: inside a band of sigma 0.43 (1.645 x 0.43 = 0.707), not 0.42.
@pytest.mark.parametrize(("error", "sigma", "inside"), [(0.0, 0.01, True), (1.0, 0.43, True), (1.0, 0.42, False),
                                                         (-0.5, 0.43, True), (-0.5, 0.42, False)])  # fmt: skip
def test_the_band_is_symmetric_in_log_step_time(error, sigma, inside):
    assert BAND_Z * 0.42 < math.log(2) < BAND_Z * 0.43
    assert inside_band(error, sigma) is inside
