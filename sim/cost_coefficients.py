"""The cost model's coefficients (sim/cost_model.py prices a step with them): a few physical efficiencies and
overheads, each default an uncalibrated estimate with its source, that `planner calibrate` fits and a calibration
profile holds."""

from __future__ import annotations

from dataclasses import asdict, dataclass


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
    # Host, per step: vLLM v1's scheduler and input preparation (block tables, slot mapping, positions)
    # take about a millisecond of Python per step at a few hundred requests (the v1 design's target was
    # to keep it small enough to hide behind the GPU step: "vLLM V1" blog, Jan 2025).
    step_overhead_s: float = 0.001
    per_row_overhead_s: float = 20e-6  # host, per scheduled request: block tables, sampling, detokenising
    # Host, per request whose prompt tokens the step computes, beyond per_row_overhead_s: admitting it (its state,
    # its first blocks) and preparing its prompt's inputs. Our CPU engine's steps with prompt tokens spend 77-145 us
    # on the host against 20-30 us for decodes (tiny-llama on this repository's CPU: ~65 us per prompt row, fitted
    # over steps.csv's host_s); without the term `calibrate --from` priced those steps 3-5.5% low
    # (docs/calibration-from-vllm.md). None: not calibrated, priced as 0 (the shipped profiles: Vidur's data time
    # the GPU's operators, not the host).
    per_prompt_row_overhead_s: float | None = None
    allreduce_latency_s: float = 15e-6  # per all-reduce call, the small-message latency of NCCL on NVLink
    # Per all-reduce call, without CUDA graphs: the wait of the first-launching rank for its peers' host
    # launches, which an eagerly launched NCCL kernel spins through. A CUDA graph replays the step's kernels
    # with no host launch between them, so it is priced with the launches below. The shipped profiles fit
    # it to Vidur's eager all-reduce times (planner.calibration.public_fit.fit_allreduce); 0 by default.
    allreduce_launch_wait_s: float = 0.0
    # Device, per layer and step, without CUDA graphs: ~10 kernels per decoder layer (norms, QKV, rotary,
    # KV write, attention, O, gate/up, activation, down) at the ~4 us a CUDA launch costs when the kernels
    # are shorter than their launches (decode); a CUDA graph replays them all for one launch.
    launch_overhead_per_layer_s: float = 40e-6
    # Device, per layer and step, with or without CUDA graphs: the time a layer's kernels take beyond the
    # rooflines (the small kernels' own durations, a GEMM's fixed cost at a few rows). A graph removes the
    # host's launches, not the kernels' time. The public profiles fit it to Vidur's per-layer times, which are
    # sums of GPU kernel durations (its torch-profiler tracer: whole microseconds), so a graphed decode step
    # keeps it; 0 by default (the spec-sheet launch term above stands for the whole fixed cost).
    kernel_floor_per_layer_s: float = 0.0
    # Device, per layer and step, with or without CUDA graphs: the attention kernel's own fixed time beyond its
    # roofline (FlashAttention's varlen kernel and its scheduling metadata; a decode row of 16 tokens of context
    # takes as long as one of 256). Measured with vLLM 0.19's kernels (LLMServingSim's profiles: the fitted
    # fixed time is 10.4-14.1 us per layer on the RTX 4090 and the RTX PRO 6000, every model and tp;
    # docs/fidelity.md, "Attention"); Vidur's data hold no attention, so every profile keeps this default.
    attention_floor_per_layer_s: float = 12e-6
    # Attention's flops run at this share of flops_efficiency: FlashAttention computes a prefill chunk in query
    # tiles whose softmax and masking the dense GEMMs do not have (LLMServingSim's grids: 0.41-0.58, median 0.47,
    # fitted with the two terms below to the step's totals as the simulator sees them).
    attention_flops_ratio: float = 0.47
    # A step that mixes a prefill chunk with other rows runs them all through the varlen prefill kernel, whose
    # K/V reads per row take this many times the split-KV decode kernel's (the same grids: 1.9-3.7, median 3.4).
    mixed_step_attention_factor: float = 3.4
    # Device, per scheduled request and layer, whatever the request's token count: 0 where attention takes
    # the whole batch in one kernel (vLLM's backends, our Triton kernel). Our CPU engine's torch attention
    # loops over the requests in Python, ~70 us per request and layer for tiny-llama on this machine's CPU
    # (docs/calibration.md): without this term the fit can only express it as a 1% flops efficiency.
    per_row_layer_overhead_s: float = 0.0
    # Speculative decoding's drafting (sim/draft_cost.py), fitted by `planner calibrate` to the live engine's timed
    # drafting; None: not calibrated, and drafting is priced from the drafter's facts alone (no fixed cost per pass)
    # and NGRAM_S_PER_CONTEXT_TOKEN. Per drafter pass, on the step's critical path: its launches and the host's work
    # between passes (inputs, sampling), which the drafter's one-layer roofline does not hold.
    draft_pass_overhead_s: float | None = None
    ngram_s_per_context_token: float | None = None  # the n-gram lookup's host seconds per context token scanned
    ngram_overhead_s: float | None = None  # ... and per lookup (one a step: its call, its batch's bookkeeping)
    # Seconds the first step after the engine waited for work takes beyond its price: whatever the engine's
    # process needs warm (its code, its data in the caches, the core's clock) has gone cold while it slept, and
    # steps back to back keep it warm. `planner calibrate` times it (gpu_engine/sweep_idle.py): about a
    # millisecond on a shared 2-vCPU VM, for steps of 1 to 2.5 ms. None: not calibrated, priced as 0 (no GPU
    # has been measured: every shipped profile lacks it).
    idle_wake_s: float | None = None

    def to_dict(self) -> dict:
        """Every coefficient; the drafting ones only when calibrated (a profile without them reads as before)."""
        return {name: value for name, value in asdict(self).items() if value is not None}
