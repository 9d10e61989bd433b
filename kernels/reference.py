"""Pure-torch references for the kernels in this package.

These are the test oracles and also the live engine's CPU path, so they run on any device and
avoid per-token Python loops (one loop iteration per sequence in attention, none elsewhere).

KV cache layout, per layer: k_cache and v_cache are each
[num_blocks, block_size, num_kv_heads, head_dim]; token slot s lives at block s // block_size,
offset s % block_size.
"""

import math

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
    sliding_window: int = 0,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim], query's dtype
    """Causal attention of each sequence's query tokens over its paged K/V.

    The query tokens of sequence i are the last q_len_i positions of its context (their K/V are
    already in the cache), so query row j sits at position seq_len - q_len + j and attends to
    positions 0..that position. Computed in float32 whatever the input dtype, then cast back.
    sliding_window > 0: it attends to the last sliding_window of them only (itself included), as
    transformers' sliding-window mask and vLLM's FlashAttention window (sliding_window - 1, 0); the
    blocks wholly before the first query's window are not read (they may be the null block: vLLM
    frees them, sim/kv_groups.py).
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
        first_block = max(0, seq_len - q_len - sliding_window + 1) // block_size if sliding_window else 0
        start = first_block * block_size  # the keys read are positions start..seq_len - 1
        blocks = block_tables[i, first_block : -(-seq_len // block_size)].long()
        k = k_cache[blocks].flatten(0, 1)[: seq_len - start]  # [seq_len - start, num_kv_heads, head_dim]
        v = v_cache[blocks].flatten(0, 1)[: seq_len - start]
        # 4-D (batch of 1): torch's CPU SDPA is several times slower on 3-D inputs
        q = query[q_start:q_end].transpose(0, 1)[None].float()  # [1, num_heads, q_len, head_dim]
        k = k.transpose(0, 1)[None].float()  # [1, num_kv_heads, seq_len, head_dim]
        v = v.transpose(0, 1)[None].float()
        mask = None  # decode (q_len == 1) without a window: the only query token sees the whole context
        if q_len > 1 or sliding_window:
            # the query is a suffix of the context: row j may see positions <= seq_len - q_len + j
            q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)[:, None]
            k_pos = torch.arange(start, seq_len, device=query.device)[None, :]
            mask = k_pos <= q_pos
            if sliding_window:
                mask &= q_pos - k_pos < sliding_window
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

    Without residual: returns normed. With residual: new_residual = x + residual (in x's dtype, as HF
    adds it) and returns (rms_norm(new_residual), new_residual). Out of place. Rounded as HF's
    LlamaRMSNorm: normalised in float32, cast to x's dtype, then multiplied by the weight (the product
    in x's dtype too), so a bf16 model matches transformers bit for bit.
    """
    if residual is not None:
        x = residual = x + residual
    xf = x.float()
    normed = (xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)).to(x.dtype) * weight
    normed = normed.to(x.dtype)
    return normed if residual is None else (normed, residual)


def rope_inv_freq(head_dim: int, theta: float, scaling: dict | None = None) -> torch.Tensor:
    """[head_dim // 2] float32 rotary frequencies, HF's formula (and its llama3 rescaling when scaling
    is {"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
    "original_max_position_embeddings"}, as sim.config.ModelSpec.rope_scaling holds it)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
    if scaling is None:
        return inv_freq
    if scaling.get("rope_type") != "llama3":
        raise ValueError(f"rope_scaling type {scaling.get('rope_type')!r}: only llama3 is implemented")
    # transformers' _compute_llama3_parameters, op for op: frequencies below the original context's
    # lowest one are divided by factor, those above the high band kept, the band between interpolated
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context_len = scaling["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_context_len / low, old_context_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cos_sin_cache(
    head_dim: int, max_positions: int, theta: float, scaling: dict | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:  # [max_positions, head_dim]: cos of each position's head_dim // 2 angles, then sin
    """The rotary table every implementation reads (this reference, the model, the Triton kernel).

    Angles and cos/sin in float32, then cast to dtype: HF casts them to the model's dtype too.
    """
    angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * rope_inv_freq(head_dim, theta, scaling)
    return torch.cat((angles.cos(), angles.sin()), dim=-1).to(dtype)


def rotary_ref(
    positions: torch.Tensor,  # [num_tokens] int
    q: torch.Tensor,  # [num_tokens, num_heads, >= rot_dim]
    k: torch.Tensor,  # [num_tokens, num_kv_heads, >= rot_dim]
    cos_sin_cache: torch.Tensor,  # [max_positions, rot_dim], from rope_cos_sin_cache
) -> tuple[torch.Tensor, torch.Tensor]:
    """Neox-style rotary embedding (rotate halves), in place on q and k (views are fine); returns (q, k).

    Rotates the first rot_dim features. Each product and sum is rounded to q's dtype, as HF's
    apply_rotary_pos_emb computes with cos/sin cast to the model's dtype.
    """
    half = cos_sin_cache.shape[1] // 2
    cos, sin = cos_sin_cache[positions].to(q.dtype).unsqueeze(1).chunk(2, dim=-1)  # [T, 1, half] each
    for x in (q, k):
        x1, x2 = x[..., :half], x[..., half : 2 * half]
        rotated1 = x1 * cos - x2 * sin
        x2.mul_(cos).add_(x1 * sin)
        x1.copy_(rotated1)
    return q, k


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:  # x: [num_tokens, 2 * d] -> [num_tokens, d]
    """SwiGLU's activation on the fused gate_up output: silu(gate) * up, in x's dtype as HF computes it."""
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up
