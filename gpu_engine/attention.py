"""Paged attention for a flat packed batch: the metadata one step carries and the one call every layer makes.

The batch is vLLM v1's: the new tokens of every scheduled request back to back, prefill chunks and decode
tokens mixed, no padding. Each layer writes its new K/V into the cache, then attends over the cache, so a
request's context (earlier steps + this step's tokens) is always read from the paged cache.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from kernels.reference import paged_attention_ref, store_kv_ref


@dataclass(frozen=True)
class AttentionMetadata:
    """Built once per step by the runner, shared by every layer (passed down, never global)."""

    slot_mapping: torch.Tensor  # [num_tokens] int64: cache slot of each new token, -1 = skip
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32, padded with 0 past a sequence's blocks
    seq_lens: torch.Tensor  # [num_seqs] int32: context length including this step's tokens
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32: sequence i's tokens are rows [loc[i], loc[i+1])
    max_query_len: int  # 1 = a pure decode step (the kernel's split-context path)
    logits_indices: torch.Tensor  # [num_sampled] int64: rows whose logits are computed (last token of each)


@cache
def _triton_ops(device_type: str) -> tuple | None:
    """(paged_attention, store_kv) Triton wrappers on CUDA when triton imports, else None (torch path)."""
    if device_type != "cuda":
        return None
    import kernels

    if not kernels.triton_available():
        return None
    from kernels.paged_attention import paged_attention
    from kernels.store_kv import store_kv

    return paged_attention, store_kv


def attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    kv_cache: tuple[torch.Tensor, torch.Tensor],  # k, v: [num_blocks, block_size, num_kv_heads, head_dim]
    attn: AttentionMetadata,
    scale: float,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Store this step's K/V at attn.slot_mapping, then causal attention of each query over its cache."""
    k_cache, v_cache = kv_cache
    ops = _triton_ops(query.device.type)
    if ops is None:
        store_kv_ref(key, value, k_cache, v_cache, attn.slot_mapping)
        return paged_attention_ref(
            query, k_cache, v_cache, attn.block_tables, attn.seq_lens, attn.query_start_loc, scale
        )
    paged_attention, store_kv = ops
    store_kv(key, value, k_cache, v_cache, attn.slot_mapping)
    return paged_attention(
        query,
        k_cache,
        v_cache,
        attn.block_tables,
        attn.seq_lens,
        attn.query_start_loc,
        scale,
        max_query_len=attn.max_query_len,
    )
