"""Neox-style rotary embedding (rotate halves), applied in place to q and k: one program per token.

cos/sin come from the same table as the torch path (reference.rope_cos_sin_cache, in the model's
dtype), so both see identical values; no trigonometry on the GPU.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rotate_heads(
    x_ptr,  # [num_tokens, num_heads, head_dim], this token's row
    cos,  # [HALF_PADDED] fp32 (values of the model's dtype)
    sin,  # [HALF_PADDED] fp32
    num_heads,
    stride_h,
    HALF: tl.constexpr,
    HEADS_PADDED: tl.constexpr,
    HALF_PADDED: tl.constexpr,
):
    h = tl.arange(0, HEADS_PADDED)[:, None]
    d = tl.arange(0, HALF_PADDED)[None, :]
    mask = (h < num_heads) & (d < HALF)
    x1_ptrs = x_ptr + h * stride_h + d
    dtype = x_ptr.dtype.element_ty
    x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x1_ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    # each product rounded to the model's dtype before the sum, as HF's (q * cos) + (rotate_half(q) * sin)
    x1_cos, x2_sin = (x1 * cos[None, :]).to(dtype), (x2 * sin[None, :]).to(dtype)
    x2_cos, x1_sin = (x2 * cos[None, :]).to(dtype), (x1 * sin[None, :]).to(dtype)
    tl.store(x1_ptrs, (x1_cos.to(tl.float32) - x2_sin.to(tl.float32)).to(dtype), mask=mask)
    tl.store(x1_ptrs + HALF, (x2_cos.to(tl.float32) + x1_sin.to(tl.float32)).to(dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr,  # [num_tokens, num_heads, head_dim]
    k_ptr,  # [num_tokens, num_kv_heads, head_dim]
    positions_ptr,  # [num_tokens]
    cos_sin_ptr,  # [max_positions, 2 * HALF]: cos, then sin
    num_heads,
    num_kv_heads,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    HALF: tl.constexpr,  # rotary dims // 2
    HEADS_PADDED: tl.constexpr,  # next power of two >= max(num_heads, num_kv_heads)
    HALF_PADDED: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, HALF_PADDED)
    row = cos_sin_ptr + tl.load(positions_ptr + token).to(tl.int64) * (2 * HALF)
    cos = tl.load(row + i, mask=i < HALF, other=0.0).to(tl.float32)
    sin = tl.load(row + HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
    _rotate_heads(q_ptr + token * stride_qt, cos, sin, num_heads, stride_qh, HALF, HEADS_PADDED, HALF_PADDED)
    _rotate_heads(k_ptr + token * stride_kt, cos, sin, num_kv_heads, stride_kh, HALF, HEADS_PADDED, HALF_PADDED)


def rotary(
    positions: torch.Tensor,  # [num_tokens] int
    q: torch.Tensor,  # [num_tokens, num_heads, >= rot_dim]
    k: torch.Tensor,  # [num_tokens, num_kv_heads, >= rot_dim]
    cos_sin_cache: torch.Tensor,  # [max_positions, rot_dim], reference.rope_cos_sin_cache
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same semantics as reference.rotary_ref: in place into q and k (views such as slices of a fused
    qkv tensor are fine); returns (q, k). check=False skips the input checks (for a caller that checked
    the same shapes once)."""
    if check:
        _check_inputs(positions, q, k, cos_sin_cache)
    if q.shape[0] == 0:
        return q, k
    half = cos_sin_cache.shape[-1] // 2
    _rotary_kernel[(q.shape[0],)](
        q, k, positions, cos_sin_cache, q.shape[1], k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        HALF=half, HEADS_PADDED=triton.next_power_of_2(max(q.shape[1], k.shape[1])),
        HALF_PADDED=triton.next_power_of_2(half), num_warps=4,
    )  # fmt: skip
    return q, k


def _check_inputs(positions, q, k, cos_sin_cache) -> None:
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or positions.shape != (q.shape[0],):
        raise ValueError(f"want positions [T], q [T, H, D], k [T, Hkv, D]; got "
                         f"{tuple(positions.shape)}, {tuple(q.shape)}, {tuple(k.shape)}")  # fmt: skip
    rot_dim = cos_sin_cache.shape[-1]
    if cos_sin_cache.dim() != 2 or rot_dim % 2 or rot_dim > min(q.shape[2], k.shape[2]):
        raise ValueError(f"cos_sin_cache {tuple(cos_sin_cache.shape)}: want [max_positions, even rot_dim <= head_dim]")
    if q.stride(2) != 1 or k.stride(2) != 1 or not cos_sin_cache.is_contiguous():
        raise ValueError("q and k need a contiguous head_dim (stride 1), cos_sin_cache to be contiguous")
