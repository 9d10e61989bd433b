"""The weights on one GPU: every parameter split over the tensor-parallel ranks, and the routed experts of a
mixture of experts placed whole on the ranks under expert parallel. sim/engine_facts.py derives an engine's
from these, once."""

from __future__ import annotations

from math import ceil

from sim.config import HardwareConfig, ModelSpec


def expert_parallel_size(m: ModelSpec, hardware: HardwareConfig) -> int:
    """The ranks a mixture of experts' routed experts are placed on whole (vLLM's ep_size), 1 without expert
    parallel. vLLM's `FusedMoEParallelConfig.make` (vllm/model_executor/layers/fused_moe/config.py) makes it
    tp x dp with --enable-expert-parallel, and the experts' own tensor-parallel size 1; the planner's replicas
    are independent engines; a data-parallel group's ranks are not (sim/data_parallel.py): tp x dp."""
    return hardware.num_gpus if hardware.expert_parallel and m.is_moe else 1


def expert_tensor_parallel_size(ep: int, tp: int) -> int:
    """The ranks each routed expert is split over (by its intermediate dimension): tp, or 1 under expert
    parallel of ep > 1 ranks (the experts are whole)."""
    return 1 if ep > 1 else tp


def max_local_experts(num_experts: int, ep: int, num_redundant: int = 0) -> int:
    """Routed experts per MoE layer on the rank that holds the most. vLLM's `determine_expert_map`
    (fused_moe/layer.py; expert_map_manager.py in later versions), linear placement: every rank gets
    num_experts // ep_size and the first num_experts % ep_size ranks one more, so the largest holds the
    ceiling. EPLB's redundant experts are physical experts too (num_experts + num_redundant of them placed).
    Without expert parallel every rank holds a slice of every expert."""
    return ceil((num_experts + num_redundant) / ep)


def replicated_weights(m: ModelSpec, dtype_bytes: int) -> tuple[int, float]:
    """(parameters, stored bytes) that vLLM holds whole on every tensor-parallel rank, within
    ModelSpec.weight_bytes' dense part: MLA's down-projections (DeepseekV2MLAAttention's fused q_a + kv_a
    projection, or kv_a alone without q_lora_rank: replicated linears, quantised as the other linears) and
    every MoE router (a ReplicatedLinear, never quantised). DeepSeek-V3: 0.92 GB of fp8 projections and 0.21 GB
    of routers on each rank, not an eighth of them at tensor parallel 8."""
    mla = 0
    if m.is_mla:
        mla = m.num_hidden_layers * m.hidden_size * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim)
    router = m.num_moe_layers * m.hidden_size * m.num_experts
    qbits = m.quantized_bits_per_weight
    mla_bytes = mla * (qbits / 8 if qbits is not None and not m.experts_only_quantized else dtype_bytes)
    return mla + router, mla_bytes + router * dtype_bytes


def absorbed_mla_copy_bytes(m: ModelSpec) -> float:
    """The bf16 copy of kv_b that vLLM's MLA keeps for its absorbed decode (W_UK, W_UV) when kv_b is
    quantised (MLACommonImpl.process_weights_after_loading dequantises it), across all ranks; split by heads
    like kv_b itself. 0 for unquantised weights, whose W_UK and W_UV are views of kv_b."""
    if not m.is_mla or m.quantized_bits_per_weight is None or m.experts_only_quantized:
        return 0.0
    per_layer = m.kv_lora_rank * m.num_attention_heads * (m.qk_nope_head_dim + m.v_head_dim)
    return float(m.num_hidden_layers * per_layer * 2)  # bfloat16


def weights_bytes(
    m: ModelSpec, dense: float, experts: float, replicated: float, tp: int, ep: int, num_redundant: int = 0
) -> int:
    """Every parameter once, every expert included, quantised weights at their stored size with their scales
    (ModelSpec.weight_bytes: `dense` and routed `experts` bytes), on the rank that holds the most. Split evenly over tensor-parallel ranks (vLLM
    shards experts over TP ranks too, by their intermediate dimension), but for what vLLM replicates on every
    rank (`replicated_weights`: MLA's down-projections, MoE routers; norms too, negligible), plus
    MLA's bf16 copy of a quantised kv_b for its absorbed decode (split by heads). Under expert parallel (over ep
    ranks) the routed experts are not sliced but placed whole (`max_local_experts`): with an uneven count the
    largest rank's share sets the memory, and vLLM profiles every rank and keeps the smallest KV pool."""
    dense_per_rank = (dense - replicated) / tp + replicated + absorbed_mla_copy_bytes(m) / tp
    if ep == 1:
        return int(dense_per_rank + experts / tp)
    return int(dense_per_rank) + int(experts * max_local_experts(m.num_experts, ep, num_redundant) / m.num_experts)
