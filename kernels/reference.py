"""Pure-torch references for the kernels in this package.

These are the test oracles and also the live engine's CPU path, so they run on any device and
avoid per-token Python loops (one loop iteration per sequence in attention, none elsewhere).

KV cache layout, per layer: k_cache and v_cache are each
[num_blocks, block_size, num_kv_heads, head_dim]; token slot s lives at block s // block_size,
offset s % block_size.
"""

import torch
import torch.nn.functional as F


def store_kv_ref(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int32/int64, -1 = padding, skipped
) -> None:
    """Write each token's K/V into its cache slot, in place."""
    block_size = k_cache.shape[1]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    blocks, offsets = slots // block_size, slots % block_size
    k_cache[blocks, offsets] = key[keep].to(k_cache.dtype)
    v_cache[blocks, offsets] = value[keep].to(v_cache.dtype)


def paged_attention_ref(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim], sequences packed back to back
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32, context length including the new query tokens
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32, cumulative offsets into query
    scale: float,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim], query's dtype
    """Causal attention of each sequence's query tokens over its paged K/V.

    The query tokens of sequence i are the last q_len_i positions of its context (their K/V are
    already in the cache), so query row j sits at position seq_len - q_len + j and attends to
    positions 0..that position. Computed in float32 whatever the input dtype, then cast back.
    """
    num_heads, num_kv_heads = query.shape[1], k_cache.shape[2]
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    block_size = k_cache.shape[1]
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        q_start, q_end = starts[i], starts[i + 1]
        q_len = q_end - q_start
        if q_len == 0:
            continue
        blocks = block_tables[i, : -(-seq_len // block_size)].long()
        k = k_cache[blocks].flatten(0, 1)[:seq_len]  # [seq_len, num_kv_heads, head_dim]
        v = v_cache[blocks].flatten(0, 1)[:seq_len]
        # 4-D (batch of 1): torch's CPU SDPA is several times slower on 3-D inputs
        q = query[q_start:q_end].transpose(0, 1)[None].float()  # [1, num_heads, q_len, head_dim]
        k = k.transpose(0, 1)[None].float()  # [1, num_kv_heads, seq_len, head_dim]
        v = v.transpose(0, 1)[None].float()
        mask = None  # decode (q_len == 1): the only query token sees the whole context
        if q_len > 1:
            # the query is a suffix of the context: row j may see positions <= seq_len - q_len + j
            mask = torch.ones(q_len, seq_len, dtype=torch.bool, device=query.device)
            mask = mask.tril(diagonal=seq_len - q_len)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=num_heads != num_kv_heads)
        out[q_start:q_end] = o[0].transpose(0, 1).to(query.dtype)
    return out


def rms_norm_ref(
    x: torch.Tensor,  # [num_tokens, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
    residual: torch.Tensor | None = None,  # [num_tokens, hidden]
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm, optionally fused with the residual add before it (vLLM's fused_add_rms_norm).

    Without residual: returns normed. With residual: new_residual = x + residual (rounded to x's
    dtype, as the engine stores it) and returns (rms_norm(new_residual), new_residual).
    Out of place. Normalisation and the weight multiply are done in float32, then cast to x's dtype.
    """
    if residual is not None:
        x = (x.float() + residual.float()).to(x.dtype)
        residual = x
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    normed = normed.to(x.dtype)
    return normed if residual is None else (normed, residual)


def rotary_ref(
    positions: torch.Tensor,  # [num_tokens] int
    q: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    head_dim: int,
    rope_theta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Neox-style rotary embedding (rotate halves), as in HF Llama. Returns new (q, k).

    Rotates the first head_dim features (all of them unless the model uses partial rotary);
    angles and products in float32, results cast to q/k's dtype.
    """
    half = head_dim // 2
    inv_freq = 1.0 / rope_theta ** (torch.arange(0, head_dim, 2, device=q.device, dtype=torch.int64).float() / head_dim)
    angles = positions.float()[:, None] * inv_freq  # [num_tokens, head_dim // 2]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., :half].float(), x[..., half:head_dim].float()
        rotated = torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
        return torch.cat((rotated.to(x.dtype), x[..., head_dim:]), dim=-1)

    return rotate(q), rotate(k)
