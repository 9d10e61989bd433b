"""Fitting the cost model's GPU-side coefficients to the public operator timings (`public_data`).

The cost model (sim/cost_model.py) prices a layer's linear layers as ONE roofline over all of the layer's
weights: max(2 * params * tokens / tp / (peak_flops * flops_efficiency), params * bytes / tp /
(bandwidth * bandwidth_efficiency)). It has no separate term for the norms, rotary embedding, activation
and residual add, so we fit that one roofline to the measured time of the WHOLE layer (every operator in
Vidur's rows): the elementwise operators are absorbed into the two efficiencies, which therefore read a
little below the pure GEMM efficiencies. Tensor parallel adds two all-reduces of the hidden states per
layer, priced as allreduce_latency_s + ring bytes / (link * interconnect_efficiency), fitted to the
measured NCCL all-reduce times at the sizes a step sends. `layer_time_s` and `allreduce_time_s` are the
cost model's terms written out per row (tests/test_public_profiles.py checks they agree with CostModel);
`layer_time_proposed_s` is the form change the per-operator data ask for (see its docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.calibration.fit import FitResult, fit_relative
from planner.calibration.public_data import AllReduceRow, OperatorRow, gpu_spec

DTYPE_BYTES = 2  # Vidur profiled in float16; the efficiencies are against the dense fp16/bf16 peak
LINEAR_NAMES = ("flops_efficiency", "bandwidth_efficiency")
ALLREDUCE_NAMES = ("interconnect_efficiency", "allreduce_latency_s")
ALLREDUCES_PER_LAYER = 2  # after attention and after the MLP (vLLM's RowParallelLinear reduces)


@dataclass(frozen=True)
class Batch:
    """Operator rows as arrays: what the cost model needs to price them, and the measured seconds."""

    params_per_layer: np.ndarray  # weights of one layer's linear layers (whole model, before tp split)
    hidden_size: np.ndarray
    num_layers: np.ndarray
    num_tokens: np.ndarray
    tensor_parallel_size: np.ndarray
    peak_flops: np.ndarray  # per row: its GPU's dense bf16 peak, flop/s
    bandwidth: np.ndarray  # bytes/s
    layer_s: np.ndarray  # measured: every operator of one layer
    linear_s: np.ndarray  # measured: the four linear operators
    emb_s: np.ndarray
    operator_s: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.num_tokens)


def linear_params(r: OperatorRow) -> int:
    """Weights of one layer's linear layers, as the cost model counts them (norms are negligible)."""
    h, head_dim = r.n_embd, r.n_embd // r.n_head
    qkv = h * (r.n_head + 2 * r.n_kv_head) * head_dim
    mlp = (3 if r.use_gated_mlp else 2) * h * r.n_expanded_embd
    return qkv + r.n_head * head_dim * h + mlp


def batch(rows: list[OperatorRow]) -> Batch:
    specs = {g: gpu_spec(g) for g in {r.gpu for r in rows}}
    a = np.asarray
    return Batch(
        params_per_layer=a([linear_params(r) for r in rows], dtype=np.float64),
        hidden_size=a([r.n_embd for r in rows], dtype=np.float64),
        num_layers=a([r.num_layers for r in rows], dtype=np.float64),
        num_tokens=a([r.num_tokens for r in rows], dtype=np.float64),
        tensor_parallel_size=a([r.tensor_parallel_size for r in rows], dtype=np.float64),
        peak_flops=a([specs[r.gpu].bf16_tflops * 1e12 for r in rows]),
        bandwidth=a([specs[r.gpu].memory_bandwidth_gbps * 1e9 for r in rows]),
        layer_s=a([r.layer_ms for r in rows]) * 1e-3,
        linear_s=a([r.linear_ms for r in rows]) * 1e-3,
        emb_s=a([r.ms["emb"] for r in rows]) * 1e-3,
        operator_s={op: a([r.ms[op] for r in rows]) * 1e-3 for op in rows[0].ms},
    )


def layer_time_s(b: Batch, flops_efficiency, bandwidth_efficiency) -> np.ndarray:
    """The cost model's linear term for one layer (CostModel: linear_flops_per_token, linear_bytes)."""
    flops = 2 * b.params_per_layer / b.tensor_parallel_size * b.num_tokens
    nbytes = b.params_per_layer * DTYPE_BYTES / b.tensor_parallel_size
    return np.maximum(flops / (b.peak_flops * flops_efficiency), nbytes / (b.bandwidth * bandwidth_efficiency))


LAUNCH_NAME = "launch_overhead_per_layer_s"


def predicted_layer_s(b: Batch, coefficients: dict[str, float], form=None) -> np.ndarray:
    """One layer's predicted time for eager rows such as Vidur's (no CUDA graph): the linear roofline
    (`form`, default the cost model's) plus the per-layer launch term where the coefficients have one."""
    roof = (form or layer_time_s)(b, coefficients["flops_efficiency"], coefficients["bandwidth_efficiency"])
    return roof + coefficients.get(LAUNCH_NAME, 0.0)


def fit_linear_launch(b: Batch) -> FitResult:
    """flops_efficiency, bandwidth_efficiency and a per-layer launch floor, fitted together: the max form
    plus launch_overhead_per_layer_s, as sim.cost_model prices an eager layer (Vidur ran no CUDA graphs)."""
    return fit_relative(
        lambda x: layer_time_s(b, x[0], x[1]) + x[2],
        b.layer_s,
        (*LINEAR_NAMES, LAUNCH_NAME),
        initial=(0.6, 0.8, 40e-6),
        lower=(0.01, 0.01, 0.0),
        upper=(1.0, 1.0, 1e-3),
        scale=(1.0, 1.0, 1e-5),
    )


def fit_layers(b: Batch) -> FitResult:
    """The fit the shipped profiles use: the cost model's form, launch term included (so that the kernels'
    floors are not absorbed into the efficiencies and then counted twice)."""
    return fit_linear_launch(b)


def allreduce_bytes(b: Batch) -> np.ndarray:
    """One all-reduce of the hidden states of every token in the step."""
    return b.num_tokens * b.hidden_size * DTYPE_BYTES


def allreduce_time_s(size_bytes, num_workers, link_bytes_per_s, interconnect_efficiency, allreduce_latency_s):
    """The cost model's price of one all-reduce call: a fixed latency plus the ring's traffic
    (2 (n - 1) / n of the message per GPU) at the link's bandwidth."""
    ring = 2 * (num_workers - 1) / num_workers * size_bytes
    return allreduce_latency_s + ring / (link_bytes_per_s * interconnect_efficiency)


def fit_allreduce(rows: list[AllReduceRow], link_bytes_per_s: float) -> FitResult:
    size = np.asarray([r.size_bytes for r in rows], dtype=np.float64)
    workers = np.asarray([r.num_workers for r in rows], dtype=np.float64)
    measured = np.asarray([r.ms for r in rows]) * 1e-3
    return fit_relative(
        lambda x: allreduce_time_s(size, workers, link_bytes_per_s, x[0], x[1]),
        measured,
        ALLREDUCE_NAMES,
        initial=(0.7, 15e-6),
        lower=(0.01, 0.0),
        upper=(1.0, 1e-3),
        scale=(1.0, 1e-5),
    )


def measured_allreduce_s(rows: list[AllReduceRow], size_bytes: np.ndarray) -> np.ndarray:
    """Measured all-reduce time at any size in the profiled range: log-log interpolation between sizes."""
    sizes = np.asarray([r.size_bytes for r in rows], dtype=np.float64)
    times = np.asarray([r.ms for r in rows]) * 1e-3
    order = np.argsort(sizes)
    return np.exp(np.interp(np.log(size_bytes), np.log(sizes[order]), np.log(times[order])))


# ---------------------------------------------------------------------------------------------------------
# The form change the per-operator data ask for (not in sim/cost_model.py yet: see docs/fidelity.md)


KERNELS_PER_LAYER = 9  # Vidur's layer: 2 norms, QKV, rotary, O, gate/up, activation, down, residual add
PROPOSED_NAMES = (*LINEAR_NAMES, "kernel_floor_s")


def layer_time_proposed_s(b: Batch, flops_efficiency, bandwidth_efficiency, kernel_floor_s) -> np.ndarray:
    """The form the per-operator data ask for: the linears' roofline as the 2-norm of compute and memory time,
    sqrt(c^2 + m^2), instead of their max, plus a fixed floor per kernel of the layer.

    - The 2-norm: measured GEMMs do not turn sharply at the ridge point (tokens = peak_flops / bandwidth);
      between about 64 and 512 tokens they are up to 20-30% slower than max(c, m) (tiles that do not fill
      the GPU's waves; weight reads and math overlapping only partly). The 2-norm is 41% above the max at the
      ridge and within 1-3% of it a factor of 4 either side; a fitted exponent (c^p + m^p)^(1/p) lands at
      p = 1.5-2.2 on every GPU and tp, so p = 2 needs no coefficient.
    - The floor: every kernel costs at least a few microseconds (launch, a partial wave), whatever its size.
      Without it the fit pulls bandwidth_efficiency down as tp shards the weights (H100: 0.73 at tp 1, 0.48
      at tp 8); with it bandwidth_efficiency stays near the kernels' streaming rate at every tp and the floor
      fits to 2.5-5 us on all three GPUs.

    For CostModel this would mean `_roof` returning np.hypot(compute_s, memory_s) for the linear term and a
    new coefficient kernel_floor_s adding KERNELS_PER_LAYER * num_hidden_layers * kernel_floor_s per step
    (and re-running `python -m planner.calibration.public_profiles`)."""
    flops = 2 * b.params_per_layer / b.tensor_parallel_size * b.num_tokens
    nbytes = b.params_per_layer * DTYPE_BYTES / b.tensor_parallel_size
    roof = np.hypot(flops / (b.peak_flops * flops_efficiency), nbytes / (b.bandwidth * bandwidth_efficiency))
    return roof + KERNELS_PER_LAYER * kernel_floor_s


def fit_linear_proposed(b: Batch) -> FitResult:
    return fit_relative(
        lambda x: layer_time_proposed_s(b, x[0], x[1], x[2]),
        b.layer_s,
        PROPOSED_NAMES,
        initial=(0.6, 0.8, 5e-6),
        lower=(0.01, 0.01, 0.0),
        upper=(1.0, 1.0, 1e-3),
        scale=(1.0, 1.0, 1e-6),
    )
