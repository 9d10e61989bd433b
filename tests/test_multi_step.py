"""`engine.num_scheduler_steps` (vLLM V0's multi-step scheduling): a batch of decodes runs that many steps from one
schedule(); requests arriving meanwhile wait for the block to end, and the host's scheduling is paid once per block.
The rule is the shared scheduler's, so the live engine (which calls the same schedule()) admits as the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import ScenarioError
from sim.cost_model import CostModel
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import build_scheduler
from tests.helpers.scenarios import make_scenario


def _staggered(**engine):
    """A short prompt at t=0 decoding 64 tokens, and a second request 100 ms later, while the first decodes."""
    workload = {
        "num_requests": 2,
        "arrival": {"process": "constant", "rate": 10.0},
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "fixed", "value": 64},
    }
    return make_scenario(workload=workload, engine={"async_scheduling": False, **engine})


def _first_step_of_second(steps) -> int:
    return int(np.argmax(steps["num_seqs"] == 2))


def test_a_request_arriving_during_a_block_is_admitted_at_its_end():
    single = simulate(_staggered(), fast_forward=False).recorder.steps.view()
    multi = simulate(_staggered(num_scheduler_steps=8), fast_forward=False).recorder.steps.view()
    assert single["start_s"][_first_step_of_second(single) - 1] <= 0.1  # one step: the next schedule() takes it
    j = _first_step_of_second(multi)
    # Step 0 computes the prompt (a block of one); blocks of 8 decode steps start at steps 1, 9, 17, ...
    assert (j - 1) % 8 == 0 and multi["start_s"][j - 1] > 0.1  # it waited for a block to end
    assert multi["start_s"][j] > single["start_s"][_first_step_of_second(single)]


def test_the_host_schedules_once_per_block_and_processes_every_token():
    scenario = _staggered(num_scheduler_steps=8)
    steps = simulate(scenario, fast_forward=False).recorder.steps.view()
    cost = CostModel(EngineFacts.of(scenario))
    rows, host = steps["num_seqs"], steps["host_s"]
    scheduled = np.isclose(host, cost.host_s(rows))  # the block's first step: scheduling, input preparation, rows
    assert scheduled[0] and scheduled[1] and not scheduled[2:9].any() and scheduled[9]
    assert np.allclose(host[2:9], cost.block_step_host_s(rows[2:9])) and (host[2:9] > 0).all()
    assert np.allclose(steps["duration_s"], steps["host_s"] + steps["device_s"])  # serial: host + device


def test_the_shared_scheduler_holds_the_block_for_the_live_engine_too():
    """schedule()/update() by hand, as gpu_engine's loop calls them: no admission within a block."""
    scenario = _staggered(num_scheduler_steps=3)
    facts = EngineFacts.of(scenario)
    memory = memory_breakdown(facts)
    sched = build_scheduler(facts, memory.num_gpu_blocks, Recorder(memory.num_gpu_blocks, 16))
    sched.add_request(Request(0, 0.0, 8, 16))
    rows = []
    for step in range(8):
        if step == 2:
            sched.add_request(Request(1, 0.0, 8, 16))
        out = sched.schedule()
        rows.append((len(out.scheduled), out.host_scheduled))
        sched.update(out, now_s=float(step))
    # prompt (block of one), then a block of three decodes in which the arrival waits, then it joins
    assert rows[:5] == [(1, True), (1, True), (1, False), (1, False), (2, True)]


@pytest.mark.parametrize("engine", [{"async_scheduling": True}, {"async_scheduling": False, "scheduler": "static"}])
def test_multi_step_needs_vllm_v0s_serial_continuous_engine(engine):
    with pytest.raises(ScenarioError, match="engine.num_scheduler_steps"):
        make_scenario(engine={**engine, "num_scheduler_steps": 10})


def test_no_vllm_serve_line_for_an_engine_todays_vllm_cannot_run():
    from planner.sizing.serve import vllm_serve_command

    line = vllm_serve_command(_staggered(num_scheduler_steps=10))
    assert line.startswith("# no vllm serve line") and "num_scheduler_steps 10" in line
    assert vllm_serve_command(_staggered()).startswith("vllm serve")
