"""Write the step's new K/V into the paged cache: one program per token, slot -1 skipped."""

import torch
import triton
import triton.language as tl


@triton.jit
def _store_kv_kernel(
    key_ptr,  # [num_tokens, num_kv_heads, head_dim]
    value_ptr,  # [num_tokens, num_kv_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping_ptr,  # [num_tokens]
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_cb,
    stride_ct,
    stride_ch,
    BLOCK_SIZE: tl.constexpr,  # cache block size, fixed per run: the division becomes a shift
    NUM_KV_HEADS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEADS_PADDED: tl.constexpr,  # next power of two >= NUM_KV_HEADS
    HEAD_DIM_PADDED: tl.constexpr,  # next power of two >= HEAD_DIM
):
    token = tl.program_id(0).to(tl.int64)
    slot = tl.load(slot_mapping_ptr + token).to(tl.int64)  # int64: slot * stride overflows int32
    if slot < 0:
        return
    h = tl.arange(0, HEADS_PADDED)[:, None]
    d = tl.arange(0, HEAD_DIM_PADDED)[None, :]
    mask = (h < NUM_KV_HEADS) & (d < HEAD_DIM)
    cache_offs = (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct + h.to(tl.int64) * stride_ch + d
    k = tl.load(key_ptr + token * stride_kt + h * stride_kh + d, mask=mask)
    v = tl.load(value_ptr + token * stride_vt + h * stride_vh + d, mask=mask)
    tl.store(k_cache_ptr + cache_offs, k.to(k_cache_ptr.dtype.element_ty), mask=mask)
    tl.store(v_cache_ptr + cache_offs, v.to(v_cache_ptr.dtype.element_ty), mask=mask)


def store_kv(
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    slot_mapping: torch.Tensor,  # [num_tokens] int32/int64, -1 = padding, skipped
    check: bool = True,
) -> None:
    """Same semantics as reference.store_kv_ref: in place, casting to the cache dtype.
    check=False skips the input checks (for a caller that checked the same shapes once)."""
    if check:
        _check_inputs(key, value, k_cache, v_cache, slot_mapping)
    num_tokens, num_kv_heads, head_dim = key.shape
    if num_tokens == 0:
        return
    _store_kv_kernel[(num_tokens,)](
        key, value, k_cache, v_cache, slot_mapping,
        key.stride(0), key.stride(1), value.stride(0), value.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        BLOCK_SIZE=k_cache.shape[1], NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim,
        HEADS_PADDED=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM_PADDED=triton.next_power_of_2(head_dim),
        num_warps=4,
    )  # fmt: skip


def _check_inputs(key, value, k_cache, v_cache, slot_mapping) -> None:
    if key.dim() != 3 or key.shape != value.shape:
        raise ValueError(f"want key, value [num_tokens, num_kv_heads, head_dim], got {key.shape}, {value.shape}")
    if k_cache.dim() != 4 or k_cache.shape != v_cache.shape or k_cache.stride() != v_cache.stride():
        raise ValueError(f"k_cache, v_cache must match [num_blocks, block_size, num_kv_heads, head_dim]: "
                         f"{k_cache.shape}, {v_cache.shape}")  # fmt: skip
    if k_cache.shape[2:] != key.shape[1:]:
        raise ValueError(f"cache heads/head_dim {tuple(k_cache.shape[2:])} != key's {tuple(key.shape[1:])}")
    if slot_mapping.shape != (key.shape[0],) or slot_mapping.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"want slot_mapping int32/int64 [{key.shape[0]}], got {slot_mapping.dtype} {tuple(slot_mapping.shape)}"
        )
    if key.stride(2) != 1 or value.stride(2) != 1 or k_cache.stride(3) != 1:
        raise ValueError("key, value and the caches need a contiguous head_dim (stride 1)")
    if len({t.device for t in (key, value, k_cache, v_cache, slot_mapping)}) != 1:
        raise ValueError("key, value, caches and slot_mapping must be on one device")
