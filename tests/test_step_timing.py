"""How long a step takes and when a request first runs: the cost model's async/eager form (host and device
sides overlapped or added, CUDA graphs, the linear layers' ridge, a mixture of experts, the CPU device) and the
driver's N+2 rule under async scheduling, which calibration fits against."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.scenarios import make_scenario

from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import build_scheduler


def test_async_overlaps_host_and_device_eager_adds_them():
    asynchronous = CostModel(EngineFacts.of(make_scenario()))
    eager = CostModel(EngineFacts.of(make_scenario(engine={"enforce_eager": True})))
    args = (256, 8, 8, 40_000, 4_000)
    host, device = asynchronous.host_s(8), asynchronous.device_s(*args)
    assert asynchronous.step_time_s(*args) == pytest.approx(max(host, device))
    assert asynchronous.step_time_s(*args, after_idle=True) == pytest.approx(host + device)
    assert eager.step_time_s(*args) == pytest.approx(eager.host_s(8) + eager.device_s(*args))


def test_cuda_graphs_remove_launches_for_decode_batches_up_to_the_capture_size():
    scenario = make_scenario()  # max_num_seqs 64: captures up to 128 rows
    graphs, eager = (
        CostModel(EngineFacts.of(scenario)),
        CostModel(EngineFacts.of(make_scenario(engine={"enforce_eager": True}))),
    )
    launches = scenario.model.num_hidden_layers * CostCoefficients().launch_overhead_per_layer_s
    for rows in (1, 64, 128):  # decode: one token per row
        assert eager.device_s(rows, rows, rows, rows * 500, rows * 500) - graphs.device_s(
            rows, rows, rows, rows * 500, rows * 500
        ) == pytest.approx(launches)
    assert eager.device_s(129, 129, 129, 64_500, 64_500) == pytest.approx(
        graphs.device_s(129, 129, 129, 64_500, 64_500)
    )
    assert eager.device_s(300, 8, 8, 9_000, 4_000) == pytest.approx(graphs.device_s(300, 8, 8, 9_000, 4_000))  # mixed


def test_the_linear_layers_turn_gradually_at_the_ridge():
    """The linears are priced as sqrt(compute^2 + memory^2) (sim/cost_model.py: why): 41% above max() where
    compute and memory time are equal, within 3% of it a factor of 4 either side; numpy steps equal scalar ones.
    (The elementwise kernels' activation traffic is its own term, added: taken off here.)"""
    scenario = make_scenario(engine={"enforce_eager": True})
    no_fixed = CostCoefficients(launch_overhead_per_layer_s=0.0, attention_floor_per_layer_s=0.0)
    cm = CostModel(EngineFacts.of(scenario), no_fixed)
    assert not scenario.model.is_moe and scenario.hardware.tensor_parallel_size == 1
    memory_s = cm.linear_bytes / cm.bytes_per_s
    ridge = memory_s * cm.linear_flops_per_s / cm.linear_flops_per_token  # tokens where compute = memory

    def linear_s(tokens):  # device time less the KV writes (no context, no sampled rows, tp 1)
        return cm.device_s(tokens, 1, 0, 0, 0) - tokens * (
            cm.kv_bytes_per_token / cm.bytes_per_s + cm.elementwise_s_per_token
        )

    for factor, expected in ((1, np.sqrt(2)), (1 / 4, np.hypot(1, 1 / 4)), (4, np.hypot(4, 1)), (1e-3, 1.0)):
        assert linear_s(factor * ridge) == pytest.approx(expected * memory_s, rel=1e-6), factor
    # The LM head is a GEMM too: at its ridge (sampled rows where its compute time equals its weight read).
    sampled = cm.lm_head_bytes / cm.bytes_per_s * cm.flops_per_s / cm.lm_head_flops_per_row
    lm_head_s = cm.device_s(1, 1, sampled, 0, 0) - cm.device_s(1, 1, 0, 0, 0)
    compute_s, lm_memory_s = sampled * cm.lm_head_flops_per_row / cm.flops_per_s, cm.lm_head_bytes / cm.bytes_per_s
    assert lm_head_s == pytest.approx(np.hypot(compute_s, lm_memory_s), rel=1e-6)
    assert lm_head_s == pytest.approx(np.sqrt(2) * lm_memory_s, rel=1e-6)  # 41% above max()
    tokens = np.array([ridge / 4, ridge, 4 * ridge])
    assert cm.device_s(tokens, np.ones(3), np.zeros(3), np.zeros(3), np.zeros(3)) == pytest.approx(
        [cm.device_s(float(t), 1, 0, 0, 0) for t in tokens], rel=1e-12
    )


def test_a_mixture_of_experts_prices_its_linears_as_one_gemm_term():
    """The routed experts' weights join the dense part's in the same 2-norm term (not a max())."""
    scenario = make_scenario(model="qwen3-30b-a3b", engine={"enforce_eager": True})
    no_fixed = CostCoefficients(launch_overhead_per_layer_s=0.0, attention_floor_per_layer_s=0.0)
    cm = CostModel(EngineFacts.of(scenario), no_fixed)
    for tokens in (1.0, 64.0, 512.0, 4096.0):
        compute_s = tokens * cm.linear_flops_per_token / cm.linear_flops_per_s
        memory_s = cm.linear_step_bytes(tokens) / cm.bytes_per_s
        elementwise_s = tokens * cm.elementwise_s_per_token
        linear_s = cm.device_s(tokens, 1, 0, 0, 0) - tokens * cm.kv_bytes_per_token / cm.bytes_per_s - elementwise_s
        assert linear_s == pytest.approx(np.hypot(compute_s, memory_s), rel=1e-6), tokens


def test_the_cpu_device_is_serial_without_graphs():
    cpu = CostModel(EngineFacts.of(make_scenario(model="tiny-llama", dtype="float32", hardware={"gpu": "cpu"})))
    assert cpu.serial and cpu.capture_size == 0


# ---------------------------------------------------------------------------------------------------------
# The driver under async scheduling


def _two_requests(**engine):
    """A long prompt at t=0 and a second request 10 ms later, while the first one's prefill (~50 ms) runs."""
    workload = {
        "num_requests": 2,
        "arrival": {"process": "constant", "rate": 100.0},
        "prompt_tokens": {"dist": "fixed", "value": 1024},
        "output_tokens": {"dist": "fixed", "value": 8},
    }
    return make_scenario(workload=workload, engine=engine)


@pytest.mark.parametrize("fast_forward", [False, True])
def test_async_a_request_arriving_during_step_n_first_runs_in_step_n_plus_2(fast_forward):
    steps = simulate(_two_requests(), fast_forward=fast_forward).recorder.steps.view()
    assert steps["start_s"][1] > 0.01  # the second request arrived during step 0
    assert list(steps["num_seqs"][:3]) == [1, 1, 2]  # step 1 was planned while step 0 ran: without it


def test_eager_a_request_arriving_during_step_n_runs_in_step_n_plus_1():
    steps = simulate(_two_requests(enforce_eager=True), fast_forward=False).recorder.steps.view()
    assert list(steps["num_seqs"][:2]) == [1, 2]
    assert np.allclose(steps["duration_s"], steps["host_s"] + steps["device_s"])


def test_async_steps_last_the_longer_side_except_after_idle():
    steps = simulate(_two_requests(), fast_forward=False).recorder.steps.view()
    sides = np.maximum(steps["host_s"], steps["device_s"])
    assert steps["duration_s"][0] == pytest.approx(steps["host_s"][0] + steps["device_s"][0])  # after idle
    assert np.allclose(steps["duration_s"][1:], sides[1:])


@pytest.mark.parametrize("hold", [True, False])
def test_async_a_request_finished_in_step_n_holds_its_slot_and_blocks_while_n_plus_1_is_planned(hold):
    """vLLM's AsyncScheduler plans N+1 before N's outputs free the requests that finished in N."""
    sched = build_scheduler(
        EngineFacts.of(make_scenario(engine={"max_num_seqs": 2})), 1000, Recorder(1000, 16, record_steps=False)
    )
    sched.hold_finished = hold
    a, b, c = Request(0, 0.0, 64, 1), Request(1, 0.0, 64, 50), Request(2, 0.0, 64, 50)
    for request in (a, b, c):
        sched.add_request(request)
    assert sched.update(sched.schedule(), 1.0) == [a]  # a's prompt and only token; b's prompt
    assert a.finished_s == 1.0  # the reply is complete at its last token either way
    free_after_n = sched.kv.pool.num_free_blocks
    assert free_after_n == 999 - 4 - (4 if hold else 0)  # b's 4 blocks, and a's 4 while held
    plan = [request for request, _ in sched.schedule().scheduled]
    if hold:
        assert plan == [b]  # a's slot kept c out of N+1; N's outputs then freed a
        assert sched.kv.pool.num_free_blocks == free_after_n - 1 + 4  # b's 65th token took a block first
        assert [request for request, _ in sched.schedule().scheduled] == [b, c]
    else:
        assert plan == [b, c]


@pytest.mark.parametrize("fast_forward", [False, True])
def test_async_a_plan_left_empty_by_held_slots_is_replanned_with_no_step_to_hide_behind(fast_forward):
    """max_num_seqs 1: the second request waits for the first; the plan of the step after the first one's last
    is empty (its slot is held), so the second one's step is planned after that step's outputs, host + device."""
    workload = {
        "num_requests": 2,
        "arrival": {"process": "constant", "rate": 1000.0},
        "prompt_tokens": {"dist": "fixed", "value": 128},
        "output_tokens": {"dist": "fixed", "value": 6},
    }
    result = simulate(make_scenario(workload=workload, engine={"max_num_seqs": 1}), fast_forward=fast_forward)
    steps, requests = result.recorder.steps.view(), result.recorder.requests.view()
    assert list(steps["num_seqs"]) == [1] * 12
    second = int(np.flatnonzero(steps["start_s"] == requests["finished_s"][0])[0])  # the second one's prefill
    assert second == 6
    assert steps["duration_s"][second] == steps["host_s"][second] + steps["device_s"][second]
    assert np.allclose(steps["duration_s"][second + 1 :], np.maximum(steps["host_s"], steps["device_s"])[second + 1 :])


def test_async_a_held_request_admitted_last_is_preempted_first_freeing_its_blocks():
    """vLLM keeps a finished request in `running` until its output is processed and preempts from the tail: a
    held request admitted after the others goes first, which frees its blocks and recomputes nothing."""
    sched = build_scheduler(
        EngineFacts.of(make_scenario(engine={"max_num_seqs": 2})), 5, Recorder(5, 16, record_steps=False)
    )
    sched.hold_finished = True
    a, b = Request(0, 0.0, 32, 50), Request(1, 0.0, 32, 1)  # two blocks each: the pool's four
    for request in (a, b):
        sched.add_request(request)
    assert sched.update(sched.schedule(), 1.0) == [b]
    plan = sched.schedule()  # a's 33rd token needs a block: b's, not a's preemption
    assert [request for request, _ in plan.scheduled] == [a] and plan.num_preempted == 0
    assert a.num_preemptions == 0 and len(a.block_ids) == 3 and not sched.finished_holding


@pytest.mark.parametrize(("max_num_seqs", "num_blocks", "seed"), [(2, 17, 5), (3, 17, 5), (3, 20, 1), (3, 23, 0)])
@pytest.mark.parametrize("fast_forward", [True, False])
def test_async_every_preemption_is_in_a_step_row(max_num_seqs, num_blocks, seed, fast_forward):
    # A plan left empty by held blocks, re-made once they were free, lost the preemptions it had made (the step
    # rows said 8 where the requests said 9); and a held request admitted last was kept while a live one went.
    scenario = make_scenario(
        engine={"max_num_seqs": max_num_seqs, "max_model_len": 256, "num_gpu_blocks_override": num_blocks,
                "enable_prefix_caching": False, "enable_chunked_prefill": False},
        workload={"num_requests": 20, "seed": seed, "arrival": {"process": "poisson", "rate": 200.0},
                  "prompt_tokens": {"dist": "uniform", "low": 1, "high": 120},
                  "output_tokens": {"dist": "uniform", "low": 1, "high": 120}},
    )  # fmt: skip
    recorder = simulate(scenario, fast_forward=fast_forward).recorder
    assert recorder.num_preemptions == recorder.requests.view()["preemptions"].sum() > 0


def test_fast_forward_matches_stepping_under_async():
    scenario = make_scenario(workload={"num_requests": 60})
    a = simulate(scenario, fast_forward=True).recorder.requests.view()
    b = simulate(scenario, fast_forward=False).recorder.requests.view()
    assert np.allclose(np.sort(a["finished_s"]), np.sort(b["finished_s"]))


# ---------------------------------------------------------------------------------------------------------
# Fitting


@pytest.mark.parametrize(
    ("model", "coefficients", "memory_bound"),
    [
        ("llama-2-7b", CostCoefficients(), True),  # a decode token reads far more K/V than it computes
        ("llama-2-7b", CostCoefficients(flops_efficiency=1e-4), False),  # a GPU with next to no flops
        ("deepseek-v2-lite", CostCoefficients(), True),  # latent attention: decode's extra flops per pair
        ("deepseek-v2-lite", CostCoefficients(flops_efficiency=1e-4), False),
        ("gemma-3-27b", CostCoefficients(), False),  # sliding layers: always the full roofline
    ],
)
def test_a_decode_window_prices_each_step_as_device_s_does_to_the_last_bit(model, coefficients, memory_bound):
    """decode_window_s takes attention's memory side alone when decode is memory-bound: the same floats as
    device_s's max of the two sides, every step, with the batch fixed or shrinking."""
    cost = CostModel(EngineFacts.of(make_scenario(model=model, engine={"max_num_seqs": 64})), coefficients)
    assert cost.decode_memory_bound == memory_bound
    context = np.arange(1_000, 41_000, 40 * 7)  # contexts summed over the rows, one per step
    shrinking = np.repeat(np.array([40, 33, 20]), [len(context) - 60, 40, 20])
    for rows in (40, shrinking):
        device, _ = cost.decode_window_s(rows, context, cost.host_s(40))
        per_row = np.broadcast_to(rows, context.shape).tolist()
        expected = [cost.device_s(n, n, n, c, c) for n, c in zip(per_row, context.tolist())]
        assert device.tolist() == expected
