"""How long a step takes: a grey-box roofline over the step's batch (DESIGN.md, "Cost model").

Each term is max(flops / (peak_flops * flops_efficiency), bytes / (peak_bw * bandwidth_efficiency)):
the linear layers (every weight read once per step, 2 flops per weight per token), attention over the
cached context (each row's K/V read once per layer; 4 flops per head_dim per query-key pair: QK^T and PV),
the KV writes and the LM head over the sampled rows; plus a fixed per-step overhead, a per-row overhead,
and under tensor parallel two ring all-reduces of the hidden states per layer. The coefficients are few and
physical so that calibration can fit them to a GPU's measured steps. Works on scalars and numpy arrays.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from sim.config import DTYPE_BYTES, Scenario
from sim.memory import kv_bytes_per_token


@dataclass(frozen=True)
class CostCoefficients:
    """Defaults are uncalibrated estimates for a GPU nobody here owns; `planner calibrate` fits them."""

    # Large bf16 GEMMs reach 60-75% of the dense peak in cuBLAS on A100/H100 (NVIDIA's published
    # MLPerf-era GEMM efficiency); small decode GEMMs fall to the bandwidth roof anyway.
    flops_efficiency: float = 0.6
    # Streaming reads reach 80-90% of the spec bandwidth (e.g. ~2.9 of 3.35 TB/s measured on H100 SXM,
    # ~1.7 of 2.0 TB/s on A100-80GB); we take the low end for whole decode steps.
    bandwidth_efficiency: float = 0.8
    # NCCL ring all-reduce reaches ~70-80% of NVLink bus bandwidth at the message sizes of a step.
    interconnect_efficiency: float = 0.7
    # Scheduler, input preparation and kernel launches that the GPU waits for: vLLM v1 with CUDA graphs
    # keeps this at one to a few ms per step.
    step_overhead_s: float = 0.002
    per_row_overhead_s: float = 20e-6  # per scheduled request: block tables, sampling, detokenising
    allreduce_latency_s: float = 15e-6  # per all-reduce call, the small-message latency of NCCL on NVLink

    def to_dict(self) -> dict:
        return asdict(self)


def peak_flops(scenario: Scenario) -> float:
    """Dense tensor-core peak for the model dtype; float32 runs as TF32 at about half the bf16 rate."""
    tflops = scenario.hardware.gpu.bf16_tflops
    return tflops * 1e12 * (0.5 if scenario.dtype == "float32" else 1.0)


class CostModel:
    def __init__(self, scenario: Scenario, coefficients: CostCoefficients | None = None) -> None:
        m, tp = scenario.model, scenario.hardware.tensor_parallel_size
        c = self.coefficients = coefficients or CostCoefficients()
        dtype_bytes = DTYPE_BYTES[scenario.dtype]
        layer_params = m.num_hidden_layers * m.params_per_layer
        self.flops_per_s = peak_flops(scenario) * c.flops_efficiency
        self.bytes_per_s = scenario.hardware.gpu.memory_bandwidth_gbps * 1e9 * c.bandwidth_efficiency
        self.linear_flops_per_token = 2 * layer_params / tp
        self.linear_bytes = layer_params * dtype_bytes / tp
        self.lm_head_flops_per_row = 2 * m.hidden_size * m.vocab_size / tp
        self.lm_head_bytes = m.hidden_size * m.vocab_size * dtype_bytes / tp
        self.attention_flops_per_pair = 4 * m.head_dim * m.num_attention_heads * m.num_hidden_layers / tp
        self.kv_bytes_per_token = kv_bytes_per_token(scenario)
        self.allreduce_s_per_token = 0.0
        self.allreduce_fixed_s = 0.0
        if tp > 1:
            link = (scenario.hardware.gpu.interconnect_bandwidth_gbps or 0) * 1e9 * c.interconnect_efficiency
            if link <= 0:
                raise ValueError(f"tensor parallel {tp} needs hardware.gpu.interconnect_bandwidth_gbps")
            calls = 2 * m.num_hidden_layers  # after attention and after the MLP
            ring_bytes_per_token = 2 * (tp - 1) / tp * m.hidden_size * dtype_bytes
            self.allreduce_s_per_token = calls * ring_bytes_per_token / link
            self.allreduce_fixed_s = calls * c.allreduce_latency_s

    def _roof(self, flops, nbytes):
        compute_s, memory_s = flops / self.flops_per_s, nbytes / self.bytes_per_s
        if isinstance(compute_s, np.ndarray) or isinstance(memory_s, np.ndarray):
            return np.maximum(compute_s, memory_s)
        return max(compute_s, memory_s)  # one step: plain floats are 10x faster than numpy scalars

    def step_time_s(self, num_tokens, num_seqs, num_sampled, attention_pairs, sum_context_tokens):
        """Seconds for one step; any argument may be a numpy array of steps."""
        c = self.coefficients
        linear = self._roof(num_tokens * self.linear_flops_per_token, self.linear_bytes)
        lm_head = self._roof(num_sampled * self.lm_head_flops_per_row, (num_sampled > 0) * self.lm_head_bytes)
        attention = self._roof(
            attention_pairs * self.attention_flops_per_pair, (sum_context_tokens + num_tokens) * self.kv_bytes_per_token
        )  # reads + writes
        allreduce = num_tokens * self.allreduce_s_per_token + self.allreduce_fixed_s
        return linear + lm_head + attention + allreduce + c.step_overhead_s + num_seqs * c.per_row_overhead_s

    def floors(self, scenario: Scenario, prompt_tokens: float) -> dict[str, float]:
        """What no engine can beat on this hardware, at 100% of spec peak and bandwidth:
        a decode step reads every weight once; a prefill also does 2 flops per weight per prompt token."""
        weights = self.linear_bytes + self.lm_head_bytes
        bw = scenario.hardware.gpu.memory_bandwidth_gbps * 1e9
        flops = peak_flops(scenario)
        prefill_flops = prompt_tokens * self.linear_flops_per_token + self.lm_head_flops_per_row
        return {
            "tpot_floor_ms": weights / bw * 1e3,
            "ttft_floor_ms": max(weights / bw, prefill_flops / flops) * 1e3,
            "prompt_tokens": prompt_tokens,
        }
