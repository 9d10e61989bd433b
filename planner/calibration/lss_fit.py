"""The cost model's terms against LLMServingSim's measured kernels (lss_data): the dense layers (the shipped
profiles of the RTX 4090 and RTX PRO 6000, by public_fit's fitter), the fused-MoE block, the LM head, the
sampler and attention. Each fit returns its relative errors per row, which docs/fidelity.md reports and the
fidelity gate holds.

The forms, and what the data say of each:
- MoE (`moe_time_s`): vLLM's fused-MoE kernel runs each activated expert's GEMMs over the tokens routed to it,
  in tiles of MOE_TILE_TOKENS rows: an expert that gets 3 tokens computes a whole tile. So its compute is
  2 x 3 x hidden x expert width x (sum over experts of its tokens rounded up to the tile), at the dense
  flops efficiency, and its memory the activated experts' weights at the bandwidth efficiency, combined as
  the linear layers' 2-norm, plus a fixed time per block (routing, align, the activation: the kernels that
  do not grow with tokens). Efficiencies come from the dense fit of the same bundle: only the fixed time and
  the tile are the MoE's own.
- LM head: one GEMM over the sampled rows, hidden x vocab / tp (the cost model's `gemm_s` at the profile's
  efficiencies).
- Sampler: a fixed time plus each sampled row's logits (the whole vocabulary in float32) streamed a number
  of times at the bandwidth efficiency: top-k/top-p sampling sorts and scans every logit.
- Attention: the cost model's max(compute, memory) at the profile's efficiencies (what the simulator prices
  today), and beside it a form with a fixed time per layer, decode rows' K/V at the bandwidth, prefill
  chunks computed in query tiles, and decode rows in a step with a prefill chunk priced at a factor of
  their own (the varlen prefill kernel takes them, not the split-KV decode kernel).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.calibration import public_fit as pf
from planner.calibration.fit import FitResult, fit_relative
from planner.calibration.lss_data import Bundle, attention_grid, dense_rows, moe_grid, per_sequence
from planner.calibration.public_data import gpu_spec

DTYPE_BYTES = 2  # bf16
MOE_TILE_TOKENS = 16  # fused_moe's smallest BLOCK_SIZE_M (vLLM's tuned configs use 16-64 rows per tile)
ATTENTION_QUERY_TILE = 128  # FlashAttention's query tile (kBlockM) for head_dim 128
LOGIT_BYTES = 4  # the sampler works on float32 logits


@dataclass(frozen=True)
class Rates:
    peak_flops: float
    bandwidth: float
    flops_efficiency: float
    bandwidth_efficiency: float

    @property
    def flops_per_s(self) -> float:
        return self.peak_flops * self.flops_efficiency

    @property
    def bytes_per_s(self) -> float:
        return self.bandwidth * self.bandwidth_efficiency


def dense_fit(b: Bundle) -> FitResult:
    return pf.fit_layers(pf.batch(dense_rows(b)))


def rates(b: Bundle, coefficients: dict[str, float]) -> Rates:
    """The bundle's GPU's spec-sheet peaks at a profile's efficiencies."""
    spec = gpu_spec(b.gpu)
    return Rates(spec.bf16_tflops * 1e12, spec.memory_bandwidth_gbps * 1e9, coefficients["flops_efficiency"],
                 coefficients["bandwidth_efficiency"])  # fmt: skip


def moe_time_s(tokens, activated, b: Bundle, r: Rates, fixed_s: float, tile: int = MOE_TILE_TOKENS):
    m = b.shape
    per_expert_params = 3 * m.hidden * m.expert_intermediate / b.tensor_parallel_size
    routed = tokens * m.top_k / activated  # tokens per activated expert (the profiler spreads them evenly)
    padded_rows = activated * np.ceil(routed / tile) * tile
    compute = 2 * per_expert_params * padded_rows / r.flops_per_s
    memory = activated * per_expert_params * DTYPE_BYTES / r.bytes_per_s
    return fixed_s + pf.gemm_s(compute, memory)


def fit_moe(b: Bundle, r: Rates) -> FitResult | None:
    grid = moe_grid(b)
    if not len(grid):
        return None
    tokens, activated, measured = grid.T
    return fit_relative(
        lambda x: moe_time_s(tokens, activated, b, r, x[0]),
        measured,
        ("moe_fixed_s",),
        initial=(20e-6,),
        lower=(0.0,),
        upper=(1e-3,),
        scale=(1e-5,),
    )


def moe_dense_form_errors(b: Bundle, r: Rates) -> np.ndarray:
    """The experts priced as the cost model does today (sim.cost_model: the touched experts' bytes and the
    routed tokens' flops in the linear layers' one 2-norm, no tile, no fixed time): the 'before'."""
    grid = moe_grid(b)
    tokens, activated, measured = grid.T
    m = b.shape
    per_expert_params = 3 * m.hidden * m.expert_intermediate / b.tensor_parallel_size
    compute = 2 * per_expert_params * tokens * m.top_k / r.flops_per_s
    memory = activated * per_expert_params * DTYPE_BYTES / r.bytes_per_s
    return pf.gemm_s(compute, memory) / measured - 1


def lm_head_errors(b: Bundle, r: Rates) -> np.ndarray:
    rows, measured = per_sequence(b)["lm_head"]
    m, tp = b.shape, b.tensor_parallel_size
    compute = 2 * m.hidden * m.vocab / tp * rows / r.flops_per_s
    memory = m.hidden * m.vocab / tp * DTYPE_BYTES / r.bytes_per_s
    return pf.gemm_s(compute, memory) / measured - 1


def sampler_time_s(rows, b: Bundle, r: Rates, fixed_s: float, passes: float):
    return fixed_s + rows * b.shape.vocab * LOGIT_BYTES * passes / r.bytes_per_s


def fit_sampler(b: Bundle, r: Rates) -> FitResult:
    rows, measured = per_sequence(b)["sampler"]
    return fit_relative(
        lambda x: sampler_time_s(rows, b, r, x[0], x[1]),
        measured,
        ("sampler_fixed_s", "sampler_logit_passes"),
        initial=(20e-6, 1.0),
        lower=(0.0, 0.0),
        upper=(1e-3, 100.0),
        scale=(1e-5, 1.0),
    )


def _attention_terms(b: Bundle):
    grid = attention_grid(b)
    chunk, cached, decodes, context, measured = grid.T
    m, tp = b.shape, b.tensor_parallel_size
    heads, kv_bytes = m.heads / tp, 2 * m.kv_heads / tp * m.head_dim * DTYPE_BYTES
    return chunk, cached, decodes, context, measured, heads, kv_bytes


def attention_sim_errors(
    b: Bundle, r: Rates, fixed_s: float = 0.0, flops_ratio: float = 1.0, mixed_factor: float = 1.0
) -> np.ndarray:
    """The simulator's attention term (sim.cost_model._attention_s: causal pairs' flops against the K/V read
    once, max() of the two) at the profile's efficiencies, with the cost model's attention coefficients:
    `fixed_s` (attention_floor_per_layer_s), `flops_ratio` (attention_flops_ratio) and `mixed_factor`
    (mixed_step_attention_factor, on a step of a prefill chunk and decode rows). The defaults: the form before
    these data."""
    chunk, cached, decodes, context, measured, heads, kv_bytes = _attention_terms(b)
    d = b.shape.head_dim
    pairs = chunk * cached + chunk * (chunk + 1) / 2 + decodes * (context + 1)
    compute = 4 * d * heads * pairs / (r.flops_per_s * flops_ratio)
    memory = ((cached + chunk) * (chunk > 0) + decodes * (context + 1)) * kv_bytes / r.bytes_per_s
    memory = memory * np.where((chunk > 0) & (decodes > 0), mixed_factor, 1.0)
    return (fixed_s + np.maximum(compute, memory)) / measured - 1


def attention_tiled_time_s(b: Bundle, x, terms=None):
    chunk, cached, decodes, context, _measured, heads, kv_bytes = terms or _attention_terms(b)
    spec = gpu_spec(b.gpu)
    flops_efficiency, bandwidth_efficiency, fixed_s, mixed_factor = x
    d, tile = b.shape.head_dim, ATTENTION_QUERY_TILE
    decode = decodes * (context + 1) * kv_bytes / (spec.memory_bandwidth_gbps * 1e9 * bandwidth_efficiency)
    decode = decode * np.where((chunk > 0) & (decodes > 0), mixed_factor, 1.0)
    tiles = np.ceil(chunk / tile)
    compute = 4 * d * heads * tiles * tile * (cached + chunk / 2) / (spec.bf16_tflops * 1e12 * flops_efficiency)
    memory = tiles * (cached + chunk) * kv_bytes / (spec.memory_bandwidth_gbps * 1e9 * bandwidth_efficiency)
    return fixed_s + decode + pf.gemm_s(compute, memory)


def fit_attention_tiled(b: Bundle) -> FitResult:
    terms = _attention_terms(b)
    return fit_relative(
        lambda x: attention_tiled_time_s(b, x, terms),
        terms[4],
        ("attention_flops_efficiency", "attention_bandwidth_efficiency", "attention_fixed_s", "mixed_decode_factor"),
        initial=(0.5, 0.8, 10e-6, 1.5),
        lower=(0.01, 0.01, 0.0, 0.5),
        upper=(1.0, 1.0, 1e-3, 10.0),
        scale=(1.0, 1.0, 1e-5, 1.0),
    )
