"""Neox-style rotary embedding (rotate halves), applied in place to q and k: one program per token."""

import functools
import os

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _rotate_heads(
    x_ptr,  # [num_tokens, num_heads, head_dim], this token's row
    cos,  # [HALF_PADDED] fp32
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
    x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x1_ptrs + HALF, mask=mask, other=0.0).to(tl.float32)
    dtype = x_ptr.dtype.element_ty
    tl.store(x1_ptrs, (x1 * cos[None, :] - x2 * sin[None, :]).to(dtype), mask=mask)
    tl.store(x1_ptrs + HALF, (x2 * cos[None, :] + x1 * sin[None, :]).to(dtype), mask=mask)


@triton.jit
def _rotary_kernel(
    q_ptr,  # [num_tokens, num_heads, head_dim]
    k_ptr,  # [num_tokens, num_kv_heads, head_dim]
    positions_ptr,  # [num_tokens]
    inv_freq_ptr,  # [head_dim // 2] fp32
    num_heads,
    num_kv_heads,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    HALF: tl.constexpr,  # rotary head_dim // 2
    HEADS_PADDED: tl.constexpr,  # next power of two >= max(num_heads, num_kv_heads)
    HALF_PADDED: tl.constexpr,
    LIBDEVICE: tl.constexpr,  # False under the CPU interpreter, which lacks libdevice
):
    token = tl.program_id(0).to(tl.int64)
    i = tl.arange(0, HALF_PADDED)
    inv_freq = tl.load(inv_freq_ptr + i, mask=i < HALF, other=0.0)
    angle = tl.load(positions_ptr + token).to(tl.float32) * inv_freq
    # angles reach tens of thousands of radians: libdevice does full range reduction, where
    # tl.cos may lower to cos.approx on GPU; the interpreter's tl.cos is numpy's, exact
    if LIBDEVICE:
        cos, sin = libdevice.cos(angle), libdevice.sin(angle)
    else:
        cos, sin = tl.cos(angle), tl.sin(angle)
    _rotate_heads(q_ptr + token * stride_qt, cos, sin, num_heads, stride_qh, HALF, HEADS_PADDED, HALF_PADDED)
    _rotate_heads(k_ptr + token * stride_kt, cos, sin, num_kv_heads, stride_kh, HALF, HEADS_PADDED, HALF_PADDED)


@functools.lru_cache(maxsize=16)
def _inv_freq(head_dim: int, rope_theta: float, device: torch.device) -> torch.Tensor:
    # the same float32 formula as reference.rotary_ref / HF Llama, so both see identical angles
    return 1.0 / rope_theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float() / head_dim)


def rotary(
    positions: torch.Tensor,  # [num_tokens] int
    q: torch.Tensor,  # [num_tokens, num_heads, >= head_dim]
    k: torch.Tensor,  # [num_tokens, num_kv_heads, >= head_dim]
    head_dim: int,
    rope_theta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same result as reference.rotary_ref, but written in place into q and k (views such as
    slices of a fused qkv tensor are fine); returns (q, k) for convenience."""
    if q.dim() != 3 or k.dim() != 3 or q.shape[0] != k.shape[0] or positions.shape != (q.shape[0],):
        raise ValueError(f"want positions [T], q [T, H, D], k [T, Hkv, D]; got "
                         f"{tuple(positions.shape)}, {tuple(q.shape)}, {tuple(k.shape)}")  # fmt: skip
    if head_dim % 2 or head_dim > min(q.shape[2], k.shape[2]):
        raise ValueError(f"head_dim={head_dim} must be even and <= q/k's last dim")
    if q.stride(2) != 1 or k.stride(2) != 1:
        raise ValueError("q and k need a contiguous head_dim (stride 1)")
    if q.shape[0] == 0:
        return q, k
    half = head_dim // 2
    _rotary_kernel[(q.shape[0],)](
        q, k, positions, _inv_freq(head_dim, float(rope_theta), q.device), q.shape[1], k.shape[1],
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        HALF=half, HEADS_PADDED=triton.next_power_of_2(max(q.shape[1], k.shape[1])),
        HALF_PADDED=triton.next_power_of_2(half),
        LIBDEVICE=os.environ.get("TRITON_INTERPRET") != "1", num_warps=4,
    )  # fmt: skip
    return q, k
