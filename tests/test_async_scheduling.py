"""`engine.async_scheduling: false`: the host's work in series with the GPU's (vLLM before its V1 engine), with
CUDA graphs kept (unlike enforce_eager), so that published figures of such engines are compared with them."""

from __future__ import annotations

import numpy as np
import pytest

from sim.cost_model import CostModel
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from tests.helpers.scenarios import make_scenario
from tests.test_step_timing import _two_requests


def test_without_async_scheduling_a_step_is_host_plus_device_and_keeps_cuda_graphs():
    serial = CostModel(EngineFacts.of(make_scenario(engine={"async_scheduling": False})))
    eager = CostModel(EngineFacts.of(make_scenario(engine={"enforce_eager": True})))
    args = (8, 8, 8, 4_000, 4_000)  # a decode step: graphed unless eager
    assert serial.serial and serial.capture_size > 0
    assert serial.step_time_s(*args) == pytest.approx(serial.host_s(8) + serial.device_s(*args))
    assert serial.device_s(*args) < eager.device_s(*args)  # eager pays every launch; graphs do not


def test_without_async_scheduling_a_request_arriving_during_step_n_runs_in_step_n_plus_1():
    steps = simulate(_two_requests(async_scheduling=False), fast_forward=False).recorder.steps.view()
    assert list(steps["num_seqs"][:2]) == [1, 2]
    assert np.allclose(steps["duration_s"], steps["host_s"] + steps["device_s"])
