"""KV sizing: one token's bytes in the KV pool on one GPU, as vLLM's page size counts it, and how vLLM's hybrid
allocator groups the layers of a model with sliding-window layers (`kv_cache_groups`). sim/engine_facts.py
derives an engine's from these, once."""

from __future__ import annotations

from math import ceil

from sim.config import EngineConfig, ModelSpec


def kv_heads_per_gpu(num_kv_heads: int, tensor_parallel_size: int) -> int:
    """KV heads are split across ranks, and replicated when there are fewer heads than ranks (vLLM)."""
    return max(1, num_kv_heads // tensor_parallel_size)


def kv_bytes_per_token_per_layer(m: ModelSpec, tensor_parallel_size: int, kv_dtype_bytes: int) -> int:
    """One token's cache in one attention layer, on one GPU, as vLLM's page size counts it.

    Multi-head latent attention (`MLAAttentionSpec`) caches the latent: kv_lora_rank + qk_rope_head_dim values,
    one "head", replicated on every tensor-parallel rank. Otherwise K and V of this rank's KV heads."""
    if m.is_mla:
        return (m.kv_lora_rank + m.qk_rope_head_dim) * kv_dtype_bytes
    heads = kv_heads_per_gpu(m.num_key_value_heads, tensor_parallel_size)
    return 2 * heads * m.head_dim * kv_dtype_bytes


def kv_cache_groups(m: ModelSpec) -> tuple[int, int, int]:
    """(layers per group, groups, sliding groups) as vLLM's `_get_kv_cache_groups_uniform_page_size`
    (vllm/v1/core/kv_cache_utils.py) groups a model's layers. One attention type: one group of all layers.
    Full and sliding layers: groups of the smaller type's layer count (or the larger's, when that is under
    1.25x the smaller: fewer padding slots), each type split into ceil(count / group size) groups. The pool
    holds one tensor per slot of a group, shared by one layer of every group: a block of the pool is
    layers per group x groups x one layer's page."""
    sliding = m.num_sliding_layers
    full = m.num_hidden_layers - sliding
    if not sliding or not full:
        return m.num_hidden_layers, 1, 1 if sliding else 0
    group = min(full, sliding)
    if max(full, sliding) < group * 1.25:
        group = max(full, sliding)
    return group, ceil(full / group) + ceil(sliding / group), ceil(sliding / group)


def sliding_window_blocks(m: ModelSpec, e: EngineConfig, max_model_len: int) -> int:
    """Blocks a sliding-window layer holds per request at most, as vLLM's `SlidingWindowSpec.
    max_memory_usage_bytes` (and its admission cap, `max_admission_blocks_per_request`): the last window - 1
    tokens plus a step's new ones, one more block because the window need not start at a block boundary. The
    newest vLLM counts every batch in flight instead of one step's (two under async scheduling): not followed."""
    if not m.num_sliding_layers:
        return 0
    tokens = min(m.sliding_window - 1 + e.max_num_batched_tokens, max_model_len)
    return ceil(tokens / e.block_size) + 1
