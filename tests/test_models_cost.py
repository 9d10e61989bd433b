"""The cost model for mixture-of-experts, quantised, sliding-window and latent-attention models."""

from __future__ import annotations

import dataclasses
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from planner.catalog import load_gpu_catalog, load_model_catalog
from planner.scenario.load import load_scenario
from sim.cost_model import CostModel, expected_experts_touched

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
MODELS = load_model_catalog()
GPUS = load_gpu_catalog()


def _scenario(model: str, gpu: str = "h100-sxm"):
    s = load_scenario(SCENARIOS / "h100_qwen3_30b_a3b.yaml")
    return dataclasses.replace(s, model=MODELS[model], hardware=dataclasses.replace(s.hardware, gpu=GPUS[gpu]))


def test_expected_experts_touched_matches_sampling() -> None:
    assert expected_experts_touched(1, 128, 8) == pytest.approx(8)
    assert expected_experts_touched(10_000, 128, 8) == pytest.approx(128)
    rng = np.random.default_rng(0)
    for n in (2, 8, 32):
        draws = [len({e for _ in range(n) for e in rng.choice(128, 8, replace=False)}) for _ in range(300)]
        assert expected_experts_touched(n, 128, 8) == pytest.approx(np.mean(draws), rel=0.02), n


def test_qwen3_30b_a3b_decode_reads_active_then_all_experts() -> None:
    s = load_scenario(SCENARIOS / "h100_qwen3_30b_a3b.yaml")
    cm, m = CostModel(s), s.model
    outside = 2 * m.embedding_params + m.hidden_size  # embeddings and lm_head: not in the linear term
    weights = [cm.linear_step_bytes(n) / 2 for n in (1, 4, 16, 64, 256)]  # params read per step (bf16)
    assert weights[0] == pytest.approx(m.active_params - outside, rel=1e-9)  # ~2.7B: the top-8 experts only
    assert weights[-1] == pytest.approx(m.num_params - outside, rel=0.005)  # 256 tokens touch ~all 128 experts
    assert m.active_params < 3.4e9 and m.num_params > 30e9
    assert all(a < b for a, b in pairwise(weights))  # the curve between rises
    # a decode step (context 1024 per row) follows it: batch 1 ~ the active read, far below batch 256
    decode = [cm.device_s(n, n, n, n * 1024, n * 1024) for n in (1, 16, 256)]
    assert decode[0] < decode[1] < decode[2]
    assert decode[0] < 0.15 * decode[2]
    full_read_s = (m.num_params * 2) / cm.bytes_per_s
    assert decode[0] < 0.15 * full_read_s
    assert isinstance(cm.device_s(8, 8, 8, 8000, 8000), float)  # one step stays on plain floats


def test_dense_models_price_as_before() -> None:
    s = _scenario("llama-3.1-8b")
    cm, m = CostModel(s), s.model
    assert cm.linear_bytes == m.num_hidden_layers * m.params_per_layer * 2
    assert cm.linear_step_bytes(100) == cm.linear_bytes
    assert cm.linear_flops_per_token == 2 * m.num_hidden_layers * m.params_per_layer


def test_quantised_weights_read_fewer_bytes_and_fp8_uses_its_rate() -> None:
    awq, bf16 = CostModel(_scenario("qwen3-32b-awq")), CostModel(_scenario("qwen3-32b"))
    assert awq.linear_bytes / bf16.linear_bytes == pytest.approx((4 + 20 / 128) / 16, rel=0.01)
    assert awq.linear_flops_per_s == bf16.linear_flops_per_s  # W4A16: the bf16 rate
    ds_h200 = CostModel(_scenario("deepseek-v3", "h200"))
    assert ds_h200.linear_flops_per_s == pytest.approx(2 * ds_h200.flops_per_s, rel=0.02)  # fp8 tensor rate
    ds_a100 = CostModel(_scenario("deepseek-v3", "a100-80gb"))
    assert ds_a100.linear_flops_per_s == ds_a100.flops_per_s  # Ampere: no fp8 tensor cores


def test_sliding_window_layers_attend_over_the_window() -> None:
    s = _scenario("gpt-oss-20b")
    windowed = CostModel(s)
    no_window = CostModel(dataclasses.replace(s, model=dataclasses.replace(s.model, sliding_window=None)))
    # short contexts (under the 128-token window): the same; long ones: half the layers read only the window
    assert windowed.device_s(64, 64, 64, 64 * 100, 64 * 100) == pytest.approx(
        no_window.device_s(64, 64, 64, 64 * 100, 64 * 100)
    )
    long_w = windowed.device_s(64, 64, 64, 64 * 32768, 64 * 32768)
    long_n = no_window.device_s(64, 64, 64, 64 * 32768, 64 * 32768)
    attention_n = long_n - no_window.device_s(64, 64, 64, 0, 0)
    attention_w = long_w - windowed.device_s(64, 64, 64, 0, 0)
    assert attention_w == pytest.approx(attention_n / 2, rel=0.02)  # 12 of 24 layers keep 128 of 32768 tokens
    arrays = windowed.device_s(np.array([64.0]), np.array([64.0]), np.array([64.0]), np.array([2e6]), np.array([2e6]))
    assert arrays[0] == pytest.approx(windowed.device_s(64, 64, 64, 2e6, 2e6))


def test_mla_reads_the_latent_and_decode_costs_more_flops() -> None:
    cm = CostModel(load_scenario(SCENARIOS / "h200x8_deepseek_v3_tp8.yaml"))
    assert cm.kv_bytes_per_token == 61 * 576 * 2  # the latent, not K and V of 128 heads
    heads, layers = 128 / 8, 61
    assert cm.attention_flops_per_pair == (2 * 192 + 2 * 128) * heads * layers  # prefill: expanded K/V
    assert cm.attention_flops_per_pair + cm.mla_decode_extra_flops_per_pair == (2 * 576 + 2 * 512) * heads * layers


def test_float32_runs_at_the_fp32_peak_without_tensor_cores() -> None:
    # PyTorch's default float32 matmul precision ("highest", kept by vLLM) uses no TF32: an H100 does 67 TFLOPS
    # there, not half its 989 bf16 TFLOPS (once assumed: 7.4x too fast for every compute-bound step).
    s = dataclasses.replace(_scenario("llama-3.1-8b"), dtype="float32")
    cm = CostModel(s)
    assert cm.flops_per_s == 67.0e12 * cm.coefficients.flops_efficiency
    floor_ms = cm.floors(s, 1105)["ttft_floor_ms"]
    expected_s = (1105 * cm.linear_flops_per_token + cm.lm_head_flops_per_row) / 67.0e12
    assert floor_ms == pytest.approx(expected_s * 1e3, rel=1e-12) and floor_ms > 200  # 31.2 ms at the old rate


def test_the_ttft_floor_prices_fp8_linear_layers_at_the_fp8_rate() -> None:
    s = _scenario("deepseek-v3", "h200")
    cm = CostModel(s)
    linear_s = 2000 * cm.linear_flops_per_token / (GPUS["h200"].fp8_tflops * 1e12)
    lm_head_s = cm.lm_head_flops_per_row / (GPUS["h200"].bf16_tflops * 1e12)
    assert cm.floors(s, 2000)["ttft_floor_ms"] == pytest.approx((linear_s + lm_head_s) * 1e3, rel=1e-12)


def test_a_float32_model_on_a_gpu_without_an_fp32_peak_is_refused(tmp_path) -> None:
    from planner.errors import ScenarioError

    path = tmp_path / "f32.yaml"
    path.write_text(
        "model: tiny-llama\ndtype: float32\n"
        "hardware: {gpu: {name: mine, memory_bytes: 8000000000, bf16_tflops: 100, memory_bandwidth_gbps: 900}}\n"
        "workload: {arrival: {process: poisson, rate: 1}}\n"
    )
    with pytest.raises(ScenarioError, match=r"f32.yaml: hardware.gpu.fp32_tflops: missing; dtype float32 needs"):
        load_scenario(path)
    path.write_text(path.read_text().replace("900}", "900, fp32_tflops: 12.5}"))
    assert (
        CostModel(load_scenario(path)).flops_per_s
        == 12.5e12 * CostModel(load_scenario(path)).coefficients.flops_efficiency
    )


def test_every_rank_reads_what_vllm_replicates_whole() -> None:
    # DeepSeek-V3's fused q_a + kv_a projections (61 x 7168 x (1536 + 576) fp8 weights with their scales) and its
    # routers (58 x 7168 x 256 in bf16) are whole on every tensor-parallel rank, the rest split: a step at tp 8
    # reads an eighth of the rest and all of them, so tp 8 less half of tp 4 leaves half of them.
    def on(tp: int) -> CostModel:
        s = _scenario("deepseek-v3", "h200")
        return CostModel(dataclasses.replace(s, hardware=dataclasses.replace(s.hardware, tensor_parallel_size=tp)))

    replicated_bytes = 61 * 7168 * (1536 + 576) * (1 + 4 / 128**2) + 58 * 7168 * 256 * 2
    assert on(8).linear_bytes - on(4).linear_bytes / 2 == pytest.approx(replicated_bytes / 2, rel=1e-9)
    replicated_params = 61 * 7168 * (1536 + 576) + 58 * 7168 * 256
    assert on(8).linear_flops_per_token - on(4).linear_flops_per_token / 2 == pytest.approx(replicated_params, rel=1e-9)
