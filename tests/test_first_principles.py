"""The product's figures recomputed from first principles, not from the code that produced them: one request's
latencies from the cost model's steps, the KV pool from the memory formula, and a fit's error bars from how often
they hold the truth. (The README's output blocks are what their commands print: tests/test_docs.py.)"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import ROOT
from helpers.calibration import FITTED, TRUTH, synthetic_rows
from helpers.scenarios import make_scenario

from planner.calibration.fitting import fit_steps
from planner.cli import main
from sim.cost_model import CostModel
from sim.driver import simulate
from sim.engine_facts import EngineFacts

# ---------------------------------------------------------------------------------------------------------
# One request alone


def alone(prompt: int, output: int, eager: bool):
    return make_scenario(
        engine={
            "enforce_eager": eager,
            "max_num_batched_tokens": 2048,
            "max_model_len": 4096,
            "enable_chunked_prefill": True,
        },
        workload={
            "num_requests": 1,
            "prompt_tokens": {"dist": "fixed", "value": prompt},
            "output_tokens": {"dist": "fixed", "value": output},
        },
    )


@pytest.mark.parametrize("eager", [True, False], ids=["serial", "async"])
@pytest.mark.parametrize("prompt", [300, 3500], ids=["one prefill step", "chunked over two"])
def test_one_request_alone_waits_for_its_prefill_steps_then_its_decode_steps(prompt, eager):
    """TTFT = the cost model's prefill step(s) of the prompt (chunks of the 2,048-token budget, the first after
    idle), E2E = TTFT + one decode step per further token, each attending over its whole context."""
    output = 40
    scenario = alone(prompt, output, eager)
    cost = CostModel(EngineFacts.of(scenario))
    budget = scenario.engine.max_num_batched_tokens
    ttft = 0.0
    for start in range(0, prompt, budget):  # chunked prefill: each chunk attends over what came before it
        n = min(budget, prompt - start)
        pairs = n * start + n * (n + 1) // 2
        ttft += cost.step_time_s(n, 1, int(start + n == prompt), pairs, start + n, after_idle=start == 0)
    decode = [cost.step_time_s(1, 1, 1, prompt + k, prompt + k) for k in range(1, output)]
    request = simulate(scenario).recorder.requests.view()
    assert len(request["request_id"]) == 1
    measured_ttft = request["first_token_s"][0] - request["arrival_s"][0]
    assert measured_ttft == pytest.approx(ttft, rel=1e-9)
    assert request["finished_s"][0] - request["arrival_s"][0] == pytest.approx(ttft + sum(decode), rel=1e-9)
    if not eager:  # async: each decode step hides the host's work behind the device's, the prefill after idle not
        assert cost.step_time_s(1, 1, 1, prompt + 1, prompt + 1) < cost.step_time_s(
            1, 1, 1, prompt + 1, prompt + 1, after_idle=True
        )


# ---------------------------------------------------------------------------------------------------------
# The memory formula


@pytest.mark.parametrize(
    "scenario",
    [
        "a10_qwen7b.yaml",
        "h100_llama31_8b_azure_conv.yaml",
        "h100x4_llama31_70b_tp4.yaml",
        "l40s_qwen25_7b_shared_prompt.yaml",
    ],
)
def test_the_kv_pool_is_what_is_left_of_the_gpu_divided_by_a_blocks_bytes(scenario, capsys):
    """vLLM's profile, recomputed: the pool is total x gpu_memory_utilization - weights - activations - non-torch
    memory - CUDA graphs, in whole blocks of 2 (K and V) x layers x KV heads per GPU x head_dim x block_size x
    the KV dtype's bytes."""
    capsys.readouterr()
    assert main(["memory", str(ROOT / "scenarios" / scenario), "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert main(["validate", str(ROOT / "scenarios" / scenario)]) == 0
    capsys.readouterr()
    from planner.scenario.load import load_scenario

    s = load_scenario(ROOT / "scenarios" / scenario)
    m, e, tp = s.model, s.engine, s.hardware.tensor_parallel_size
    assert mem["kv_cache_groups"] == 1  # one group: the formula below (sliding windows have their own tests)
    kv_heads = max(1, m.num_key_value_heads // tp)
    dtype_bytes = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1}[s.kv_dtype]
    block_bytes = 2 * m.num_hidden_layers * kv_heads * m.head_dim * e.block_size * dtype_bytes
    assert mem["block_bytes"] == block_bytes
    assert mem["total_bytes"] == s.hardware.gpu.memory_bytes
    left = (
        math.ceil(mem["total_bytes"] * e.gpu_memory_utilization)
        - mem["weights_bytes"]
        - mem["activation_bytes"]
        - mem["non_torch_bytes"]
        - mem["cuda_graph_bytes"]
    )
    assert abs(mem["kv_cache_bytes"] - left) <= 1  # vLLM rounds the requested memory to a byte
    assert mem["num_gpu_blocks"] == mem["kv_cache_bytes"] // block_bytes > 0
    assert mem["max_kv_tokens"] == mem["num_gpu_blocks"] * e.block_size
    # the weights are the model's parameters at the weights' dtype, split over the tensor-parallel GPUs
    weight_bytes = {"bfloat16": 2, "float16": 2, "float32": 4}[s.dtype]
    assert mem["weights_bytes"] == pytest.approx(m.num_params * weight_bytes / tp, rel=0.02)


# ---------------------------------------------------------------------------------------------------------
# Calibration: the fit's error bars


def test_calibration_recovers_known_coefficients_and_its_std_covers_the_truth_as_often_as_it_should():
    """Steps priced by known coefficients, each side with 2% multiplicative noise, fitted over 40 seeds: the fits
    centre on the truth, and the truth lies within the fit's reported 1, 2 and 3 std about as often as a normal
    error does (68%, 95%, 99.7%). A std too small by half would cover 38% at 1 std, one too large by half 95%."""
    scenario = make_scenario()
    z = {name: [] for name in FITTED}
    for seed in range(40):
        fit = fit_steps(scenario, synthetic_rows(scenario, TRUTH, noise=0.02, seed=seed))
        for name in FITTED:
            z[name].append((getattr(fit.coefficients, name) - getattr(TRUTH, name)) / fit.uncertainty[name])
    every = np.abs(np.concatenate(list(z.values())))  # 240 draws
    assert 0.58 <= np.mean(every <= 1) <= 0.78, np.mean(every <= 1)
    assert np.mean(every <= 2) >= 0.89, np.mean(every <= 2)
    assert np.mean(every <= 3) >= 0.97, np.mean(every <= 3)
    for name, values in z.items():  # unbiased: each coefficient's mean error well inside its spread
        assert abs(np.mean(values)) < 0.6, (name, np.mean(values))
