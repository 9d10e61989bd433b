"""Sliding-window paged attention on the torch path (Mistral v0.1, Mixtral with a window).

A query at position p attends to keys at positions p - window + 1 .. p (window keys, itself included), as
transformers' sliding-window causal mask and vLLM's FlashAttention window (sliding_window - 1, 0). The cache
keeps every token (the engine does not free blocks that leave the window); only the mask changes. The
Triton paged kernel has no window, so the engine runs these models on the torch path only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gpu_engine.attention import AttentionMetadata, KernelOps


def sliding_window_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,
    kv_cache: tuple[torch.Tensor, torch.Tensor],  # k, v: [num_blocks, block_size, num_kv_heads, head_dim]
    attn: AttentionMetadata,
    scale: float,
    ops: KernelOps,
    window: int,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Store this step's K/V, then each query over the last `window` positions of its cache (float32, as
    kernels/reference.py's paged_attention_ref, which this follows with a windowed mask)."""
    k_cache, v_cache = kv_cache
    ops.store_kv(key, value, k_cache, v_cache, attn.slot_mapping)
    num_heads, num_kv_heads, block_size = query.shape[1], k_cache.shape[2], k_cache.shape[1]
    out = torch.empty_like(query)
    starts = attn.query_start_loc.tolist()
    for i, seq_len in enumerate(attn.seq_lens.tolist()):
        q_start, q_end = starts[i], starts[i + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        blocks = attn.block_tables[i, : -(-seq_len // block_size)].long()
        k = k_cache[blocks].flatten(0, 1)[:seq_len].transpose(0, 1)[None].float()  # [1, KVH, S, D]
        v = v_cache[blocks].flatten(0, 1)[:seq_len].transpose(0, 1)[None].float()
        q = query[q_start:q_end].transpose(0, 1)[None].float()  # [1, H, q_len, D]
        q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)[:, None]
        k_pos = torch.arange(seq_len, device=query.device)[None, :]
        mask = (k_pos <= q_pos) & (q_pos - k_pos < window)  # [q_len, S]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=num_heads != num_kv_heads)
        out[q_start:q_end] = o[0].transpose(0, 1).to(query.dtype)
    return out
