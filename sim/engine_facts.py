"""What one engine is, derived once: the facts about a model on its GPUs that the memory model
(sim/memory.py), the cost model (sim/cost_model.py) and the KV manager (sim/kv_groups.py, sim/scheduler.py)
read, so that none of them derives another's.

An engine is one replica of a pool: `tensor_parallel_size` GPUs running one model with one engine's settings.
`EngineFacts.derive` builds the facts from those four inputs (model, dtype, hardware, engine), so an engine
that is not a whole scenario gets its own the same way: each pool of a fleet from its GPUs and settings, a
draft model from its own spec on the same GPUs. The formulas stay where their sources are cited: the weights'
placement in sim/weights.py, the KV page and vLLM's layer groups in sim/kv_sizing.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sim.config import DTYPE_BYTES, HOST_DEVICES, EngineConfig, GpuSpec, HardwareConfig, ModelSpec, Scenario
from sim.draft_model import draft_spec, fusion_params, shared_params
from sim.kv_sizing import kv_bytes_per_token_per_layer, kv_cache_groups, sliding_window_blocks
from sim.weights import (
    expert_parallel_size,
    expert_tensor_parallel_size,
    max_local_experts,
    replicated_weights,
    weights_bytes,
)

MAX_CUDA_GRAPH_CAPTURE_SIZE = 512  # CompilationConfig: max_cudagraph_capture_size = min(2 x max_num_seqs, 512)


@dataclass(frozen=True)
class EngineFacts:
    """One engine's derived facts; per GPU means on the rank that holds the most."""

    # --- the inputs every fact below is derived from ---
    model: ModelSpec
    dtype: str  # the weights' and activations' (the scenario's dtype)
    hardware: HardwareConfig  # the engine's GPUs: gpu, tensor_parallel_size, expert_parallel (replicas unused)
    engine: EngineConfig
    # --- the engine ---
    max_model_len: int  # engine.max_model_len, else the model's max_position_embeddings
    dtype_bytes: int
    # No CUDA graphs and no async scheduling (steps serial): engine.enforce_eager, or the host as device, which
    # captures no graphs and whose host and "device" share the same cores.
    eager: bool
    # Host work in series with the device's (a step takes host + device): eager, or engine.async_scheduling
    # off (vLLM before its V1 engine), which keeps CUDA graphs.
    serial: bool
    # The largest decode batch replayed from a CUDA graph: min(2 x max_num_seqs, 512), as vLLM's
    # `VllmConfig._set_cudagraph_sizes`; 0 when eager.
    cudagraph_capture_size: int
    # --- a mixture of experts' placement (sim/weights.py) ---
    expert_parallel_size: int  # ranks the routed experts are placed on whole; 1 without expert parallel
    expert_tensor_parallel_size: int  # ranks each routed expert is split over: tp, or 1 under expert parallel
    max_local_experts: int  # routed experts per MoE layer on the rank that holds the most (0: a dense model)
    # --- the weights ---
    weights_bytes: int  # per GPU, as vLLM's profiling counts them (sim/weights.py)
    dense_weight_bytes: float  # the whole model's stored bytes but the routed experts', over all ranks
    expert_weight_bytes: float  # the routed experts' stored bytes, every expert of every MoE layer
    replicated_params: int  # held whole on every rank (MLA's down-projections, MoE routers)
    replicated_weight_bytes: float
    # --- the KV cache (sim/kv_sizing.py) ---
    kv_bytes_per_token_per_layer: int  # one token's K and V (or MLA latent) in one attention layer, per GPU
    kv_layers_per_group: int  # vLLM's hybrid allocator: layers per KV cache group (all layers: one group)
    kv_cache_groups: int
    sliding_groups: int  # of those, sliding-window groups
    # Bytes of the KV pool per token of one block, per GPU: every layer slot of every group. For one attention
    # type that is every layer's K and V; for a hybrid model, what vLLM's "GPU KV cache size: N tokens"
    # divides by (num_blocks // groups x block_size); a sliding-window group then holds at most
    # sliding_window_blocks per request (`MemoryBreakdown.requests_that_fit`).
    kv_bytes_per_token: int
    sliding_window_blocks: int  # blocks a sliding-window layer holds per request at most (0: none)
    # vLLM's hybrid KV allocator serves this engine (sim/kv_groups.py): sliding-window layers, paged KV and the
    # continuous scheduler. The baselines (static scheduler, contiguous KV) keep every layer's whole context.
    hybrid_kv: bool
    # --- speculative decoding (engine.speculative; sim/draft_model.py) ---
    draft: EngineFacts | None = None  # the drafter's own facts, on the same GPUs; None: no drafter model
    # The drafter's weights on one GPU that the target does not already hold (the embedding and LM head it shares
    # are the target's tensors), its fusion projection included: what vLLM's profiling finds loaded beside them.
    draft_weights_bytes: int = 0

    @property
    def gpu(self) -> GpuSpec:
        return self.hardware.gpu

    @property
    def tensor_parallel_size(self) -> int:
        return self.hardware.tensor_parallel_size

    @classmethod
    def of(cls, scenario: Scenario) -> EngineFacts:
        """The facts of a scenario's engine (each of its replicas)."""
        return cls.derive(scenario.model, scenario.dtype, scenario.hardware, scenario.engine)

    @classmethod
    def derive(cls, model: ModelSpec, dtype: str, hardware: HardwareConfig, engine: EngineConfig) -> EngineFacts:
        """The facts of `model` in `dtype` on `hardware`'s GPUs with `engine`'s settings."""
        tp, dtype_bytes = hardware.tensor_parallel_size, DTYPE_BYTES[dtype]
        max_model_len = engine.max_model_len_for(model)
        eager = engine.enforce_eager or hardware.gpu.name in HOST_DEVICES
        ep = expert_parallel_size(model, hardware)
        dense_bytes, expert_bytes = model.weight_bytes(dtype_bytes)
        replicated_params, replicated_bytes = replicated_weights(model, dtype_bytes)
        per_layer = kv_bytes_per_token_per_layer(model, tp, DTYPE_BYTES[engine.kv_dtype_for(dtype)])
        layers_per_group, groups, sliding_groups = kv_cache_groups(model)
        draft, draft_bytes = cls._drafter(model, dtype, hardware, engine)
        return cls(
            model=model,
            dtype=dtype,
            hardware=hardware,
            engine=engine,
            max_model_len=max_model_len,
            dtype_bytes=dtype_bytes,
            eager=eager,
            serial=eager or not engine.async_scheduling,
            cudagraph_capture_size=0 if eager else min(2 * engine.max_num_seqs, MAX_CUDA_GRAPH_CAPTURE_SIZE),
            expert_parallel_size=ep,
            expert_tensor_parallel_size=expert_tensor_parallel_size(ep, tp),
            max_local_experts=max_local_experts(model.num_experts, ep, engine.eplb_num_redundant_experts),
            weights_bytes=weights_bytes(
                model, dense_bytes, expert_bytes, replicated_bytes, tp, ep, engine.eplb_num_redundant_experts
            ),
            dense_weight_bytes=dense_bytes,
            expert_weight_bytes=expert_bytes,
            replicated_params=replicated_params,
            replicated_weight_bytes=replicated_bytes,
            kv_bytes_per_token_per_layer=per_layer,
            kv_layers_per_group=layers_per_group,
            kv_cache_groups=groups,
            sliding_groups=sliding_groups,
            kv_bytes_per_token=layers_per_group * groups * per_layer,
            sliding_window_blocks=sliding_window_blocks(model, engine, max_model_len),
            hybrid_kv=bool(sliding_groups) and engine.kv_cache == "paged" and engine.scheduler == "continuous",
            draft=draft,
            draft_weights_bytes=draft_bytes,
        )

    @classmethod
    def _drafter(
        cls, model: ModelSpec, dtype: str, hardware: HardwareConfig, engine: EngineConfig
    ) -> tuple[EngineFacts | None, int]:
        """The drafter's facts (its spec on the target's GPUs, sharded like the target, without speculation of its
        own) and its stored weights per GPU; (None, 0) without a drafter model."""
        spec = engine.speculative
        draft_model = None if spec is None else draft_spec(model, spec)
        if draft_model is None:
            return None, 0
        draft = cls.derive(draft_model, dtype, hardware, dataclasses.replace(engine, speculative=None))
        tp, dtype_bytes = hardware.tensor_parallel_size, DTYPE_BYTES[dtype]
        every_pass, first_pass = fusion_params(spec, model)
        own = (every_pass + first_pass - shared_params(spec, draft_model)) * dtype_bytes / tp
        return draft, int(draft.weights_bytes + own)
