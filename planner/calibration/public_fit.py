"""Fitting the cost model's GPU-side coefficients to the public operator timings (`public_data`).

The cost model (sim/cost_model.py) prices a layer's linear layers as ONE GEMM term over all of the layer's
weights: gemm_s(compute, memory), the 2-norm sqrt(compute^2 + memory^2) of compute = 2 * params * tokens /
tp / (peak_flops * flops_efficiency) and memory = params * bytes / tp / (bandwidth * bandwidth_efficiency),
plus the elementwise kernels' activation traffic (norms with residual adds, rotary, activation:
sim.cost_model.elementwise_elements_per_token) at the same bandwidth, plus kernel_floor_per_layer_s, the time
the layer's kernels take beyond those rooflines. Vidur's times are sums of the kernels' GPU durations (its
torch-profiler tracer; every value is a whole microsecond), not wall time: no host launch gap is in them, so
the floor is device time that a CUDA graph keeps. These are fitted to the measured time of the WHOLE
layer (every operator in Vidur's rows). Tensor parallel adds two all-reduces of the hidden states per
layer, priced as allreduce_latency_s + ring bytes / (link * interconnect_efficiency), fitted to the
measured NCCL all-reduce times at the sizes a step sends. `layer_time_s` and `allreduce_time_s` are the
cost model's terms written out per row (tests/test_public_profiles.py checks they agree with CostModel).
`layer_time_norm_s` is the evidence for the form: the same term as a p-norm, max() at p = inf, which
docs/fidelity.md fits beside the shipped form (why p = 2: sim/cost_model.py's docstring).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from planner.calibration.fit import FitResult, fit_relative
from planner.calibration.public_data import ALL_REDUCE_SETUPS, AllReduceRow, OperatorRow, gpu_spec
from sim.cost_model import elementwise_elements_per_token, gemm_s

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
    elementwise_bytes_per_token: np.ndarray  # one layer's norms, rotary and activation (sim.cost_model)

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
        elementwise_bytes_per_token=a([elementwise_bytes_per_token(r) for r in rows], dtype=np.float64),
    )


def elementwise_bytes_per_token(r: OperatorRow) -> float:
    """sim.cost_model.elementwise_elements_per_token for a row's model and tp, in bytes. Vidur's layer runs
    the add apart from the norms (3 elements per hidden unit, not the fused kernel's 4): within the term's
    few percent of a layer, absorbed by the fit."""
    head_dim = r.n_embd // r.n_head
    qk_width = (r.n_head + r.n_kv_head) * head_dim / r.tensor_parallel_size
    # phi-2's GELU MLP reads one input, not gate and up: 2 elements per unit, as 3 x (2/3) of the width
    mlp_width = r.n_expanded_embd / r.tensor_parallel_size * (1 if r.use_gated_mlp else 2 / 3)
    return elementwise_elements_per_token(r.n_embd, qk_width, mlp_width) * DTYPE_BYTES


def elementwise_s(b: Batch, bandwidth_efficiency) -> np.ndarray:
    """The cost model's elementwise term for one layer: its activation traffic at the fitted bandwidth."""
    return b.num_tokens * b.elementwise_bytes_per_token / (b.bandwidth * bandwidth_efficiency)


def _compute_memory_s(b: Batch, flops_efficiency, bandwidth_efficiency) -> tuple[np.ndarray, np.ndarray]:
    """One layer's linears: (compute seconds, memory seconds), as CostModel counts linear_flops_per_token
    and linear_bytes."""
    flops = 2 * b.params_per_layer / b.tensor_parallel_size * b.num_tokens
    nbytes = b.params_per_layer * DTYPE_BYTES / b.tensor_parallel_size
    return flops / (b.peak_flops * flops_efficiency), nbytes / (b.bandwidth * bandwidth_efficiency)


def layer_time_s(b: Batch, flops_efficiency, bandwidth_efficiency) -> np.ndarray:
    """The cost model's linear term for one layer: sim.cost_model.gemm_s itself."""
    return gemm_s(*_compute_memory_s(b, flops_efficiency, bandwidth_efficiency))


def layer_time_norm_s(b: Batch, flops_efficiency, bandwidth_efficiency, p: float) -> np.ndarray:
    """The linear term as (compute^p + memory^p)^(1/p): max() at p = inf, the cost model's form at p = 2.
    Only docs/fidelity.md uses it, to show which p the data ask for."""
    compute, memory = _compute_memory_s(b, flops_efficiency, bandwidth_efficiency)
    if np.isinf(p):
        return np.maximum(compute, memory)
    top = np.maximum(compute, memory)  # scaled, so that large p does not overflow
    return top * ((compute / top) ** p + (memory / top) ** p) ** (1 / p)


KERNEL_NAME = "kernel_floor_per_layer_s"


def predicted_layer_s(b: Batch, coefficients: dict[str, float], form=None) -> np.ndarray:
    """One layer's predicted device time for rows such as Vidur's: the linear roofline (`form`, default the
    cost model's), the elementwise kernels, plus the per-layer kernel floor where the coefficients have one."""
    roof = (form or layer_time_s)(b, coefficients["flops_efficiency"], coefficients["bandwidth_efficiency"])
    return roof + elementwise_s(b, coefficients["bandwidth_efficiency"]) + coefficients.get(KERNEL_NAME, 0.0)


def fit_layers(b: Batch, form=None, elementwise: bool = True) -> FitResult:
    """The fit the shipped profiles use: flops_efficiency, bandwidth_efficiency and the per-layer kernel floor
    together, as sim.cost_model prices a layer's device time; the floor is fitted so that the kernels' fixed
    time is not absorbed into the efficiencies and then counted twice.
    `form`: the linear term (default the cost model's, `layer_time_s`). `elementwise=False`: without the
    elementwise kernels' term, as the cost model was before it (docs/fidelity.md's evidence only)."""
    form = form or layer_time_s
    share = 1.0 if elementwise else 0.0
    return fit_relative(
        lambda x: form(b, x[0], x[1]) + share * elementwise_s(b, x[1]) + x[2],
        b.layer_s,
        (*LINEAR_NAMES, KERNEL_NAME),
        initial=(0.6, 0.8, 40e-6),
        lower=(0.01, 0.01, 0.0),
        upper=(1.0, 1.0, 1e-3),
        scale=(1.0, 1.0, 1e-5),
    )


NORM_NAME = "p"


def fit_layers_free_norm(b: Batch) -> FitResult:
    """`fit_layers` with the norm's exponent p fitted too (docs/fidelity.md: does p = 2 fit?)."""
    return fit_relative(
        lambda x: layer_time_norm_s(b, x[0], x[1], x[3]) + elementwise_s(b, x[1]) + x[2],
        b.layer_s,
        (*LINEAR_NAMES, KERNEL_NAME, NORM_NAME),
        initial=(0.6, 0.8, 40e-6, 2.0),
        lower=(0.01, 0.01, 0.0, 1.0),
        upper=(1.0, 1.0, 1e-3, 20.0),
        scale=(1.0, 1.0, 1e-5, 1.0),
    )


ELEMENTWISE_EFFICIENCY_NAME = "elementwise_bandwidth_efficiency"


def fit_layers_elementwise_efficiency(b: Batch) -> FitResult:
    """`fit_layers` with the elementwise kernels at a bandwidth efficiency of their own (docs/fidelity.md:
    evidence only; the cost model prices them at bandwidth_efficiency)."""
    return fit_relative(
        lambda x: layer_time_s(b, x[0], x[1]) + elementwise_s(b, x[3]) + x[2],
        b.layer_s,
        (*LINEAR_NAMES, KERNEL_NAME, ELEMENTWISE_EFFICIENCY_NAME),
        initial=(0.6, 0.8, 40e-6, 0.6),
        lower=(0.01, 0.01, 0.0, 0.01),
        upper=(1.0, 1.0, 1e-3, 1.0),
        scale=(1.0, 1.0, 1e-5, 1.0),
    )


def allreduce_bytes(b: Batch) -> np.ndarray:
    """One all-reduce of the hidden states of every token in the step."""
    return b.num_tokens * b.hidden_size * DTYPE_BYTES


def allreduce_time_s(size_bytes, num_workers, link_bytes_per_s, interconnect_efficiency, allreduce_latency_s):
    """The cost model's price of one all-reduce call: a fixed latency plus the ring's traffic
    (2 (n - 1) / n of the message per GPU) at the link's bandwidth."""
    ring = 2 * (num_workers - 1) / num_workers * size_bytes
    return allreduce_latency_s + ring / (link_bytes_per_s * interconnect_efficiency)


# Below this size a bin's all-reduce is latency, not bytes, and its runs land in two states (public_data's
# ALL_REDUCE_NOISE): the all-reduce itself, or that plus a host launch wait.
LOW_STATE_MAX_BYTES = 1 << 20
WAIT_NAME = "allreduce_launch_wait_s"


def fit_allreduce(rows: list[AllReduceRow], link_bytes_per_s) -> FitResult:
    """interconnect_efficiency, allreduce_latency_s and allreduce_launch_wait_s from the measured bins.

    The form, latency + ring bytes at a fitted fraction of the link, is fitted to the pooled medians: what an
    eager all-reduce costs, as Vidur timed it (11 back-to-back eager calls). Below LOW_STATE_MAX_BYTES that
    latency mixes two states: the all-reduce itself, and the all-reduce plus the wait of the first-launching
    rank for a later peer's host launch (ALL_REDUCE_NOISE). A step replayed from a CUDA graph launches no
    kernel from the host, so it does not pay that wait (sim.cost_model prices it with the launches graphs
    remove). So the fitted latency is split: allreduce_latency_s = the low state, the median over the small
    bins of their lower envelope (each bin's 10th percentile of its sizes' fastest runs, less the fitted
    ring term), at most the fitted latency; allreduce_launch_wait_s = the rest. latency + wait is the
    fitted eager price, unchanged; `relative_errors` are its errors on the pooled medians."""
    size = np.asarray([r.size_bytes for r in rows], dtype=np.float64)
    workers = np.asarray([r.num_workers for r in rows], dtype=np.float64)
    measured = np.asarray([r.ms for r in rows]) * 1e-3
    fit = fit_relative(
        lambda x: allreduce_time_s(size, workers, link_bytes_per_s, x[0], x[1]),
        measured,
        ALLREDUCE_NAMES,
        initial=(0.7, 15e-6),
        lower=(0.01, 0.0),
        upper=(1.0, 1e-3),
        scale=(1.0, 1e-5),
    )
    efficiency, eager_latency_s = fit.values
    small = size < LOW_STATE_MAX_BYTES
    fastest = np.asarray([r.fastest_p10_ms for r in rows]) * 1e-3
    low = (fastest - allreduce_time_s(size, workers, link_bytes_per_s, efficiency, 0.0))[small]
    low_latency_s = min(float(np.median(low)), eager_latency_s)
    low_std = 1.25 * float(np.std(low)) / np.sqrt(len(low))  # standard error of a median
    return FitResult(
        names=(*ALLREDUCE_NAMES, WAIT_NAME),
        values=np.asarray([efficiency, low_latency_s, eager_latency_s - low_latency_s]),
        std=np.asarray([fit.std[0], low_std, float(np.hypot(fit.std[1], low_std))]),
        relative_errors=fit.relative_errors,
        at_bound=fit.at_bound,
    )


def eager_allreduce_latency_s(coefficients: dict[str, float]) -> float:
    """The fixed part of an all-reduce launched eagerly from the host, as Vidur's rows were: the all-reduce
    itself plus the launch wait (0 where the coefficients have none)."""
    return coefficients["allreduce_latency_s"] + coefficients.get(WAIT_NAME, 0.0)


def measured_allreduce_s(rows: list[AllReduceRow], size_bytes: np.ndarray) -> np.ndarray:
    """Measured all-reduce time at any size in the profiled range: log-log interpolation between sizes."""
    sizes = np.asarray([r.size_bytes for r in rows], dtype=np.float64)
    times = np.asarray([r.ms for r in rows]) * 1e-3
    order = np.argsort(sizes)
    return np.exp(np.interp(np.log(size_bytes), np.log(sizes[order]), np.log(times[order])))


def all_reduce_rows(gpu: str, tp: int, rows: list[AllReduceRow]) -> list[AllReduceRow]:
    setup = ALL_REDUCE_SETUPS.get(gpu)
    return [r for r in rows if r.setup == setup and r.num_workers == tp]


def step_times_s(b, coefficients: dict[str, float], link_bytes_per_s: float, ar_rows: list[AllReduceRow], form=None):
    """(measured, predicted) GPU time of the operators a step's forward pass runs that Vidur measured:
    every layer (and two all-reduces per layer under tensor parallel) plus the embedding. The measured
    all-reduce is interpolated between measured sizes; the predicted one is the cost model's price.
    `form`: the layer's price (default: the cost model's, public_fit.layer_time_s)."""
    measured_layer = b.layer_s.copy()
    predicted_layer = predicted_layer_s(b, coefficients, form)
    if ar_rows:
        size = allreduce_bytes(b)
        measured_layer += ALLREDUCES_PER_LAYER * measured_allreduce_s(ar_rows, size)
        predicted_layer += ALLREDUCES_PER_LAYER * allreduce_time_s(
            size,
            b.tensor_parallel_size,
            link_bytes_per_s,
            coefficients["interconnect_efficiency"],
            eager_allreduce_latency_s(coefficients),  # Vidur's layers ran eagerly: launches and waits paid
        )
    return b.num_layers * measured_layer + b.emb_s, b.num_layers * predicted_layer
