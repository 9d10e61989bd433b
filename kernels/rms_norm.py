"""RMSNorm with the residual add before it fused in (vLLM's fused_add_rms_norm): one program per row.

Rounded as reference.rms_norm_ref (HF's LlamaRMSNorm). The weight has x's dtype in the engine."""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_kernel(
    out_ptr,  # [num_tokens, hidden]
    new_residual_ptr,  # [num_tokens, hidden], written when HAS_RESIDUAL
    x_ptr,  # [num_tokens, hidden]
    residual_ptr,  # [num_tokens, hidden], read when HAS_RESIDUAL
    weight_ptr,  # [hidden]
    eps,
    hidden,
    stride_xt,
    stride_rt,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,  # next power of two >= hidden
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    x = tl.load(x_ptr + row * stride_xt + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        residual = tl.load(residual_ptr + row * stride_rt + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + residual.to(tl.float32)).to(x_ptr.dtype.element_ty)  # rounded as stored
        tl.store(new_residual_ptr + row * hidden + cols, x, mask=mask)
    x = x.to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / hidden + eps)
    weight = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # rounded to the model's dtype before the weight multiply, as HF's LlamaRMSNorm
    normed = (x * rstd).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * hidden + cols, (normed * weight).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor,  # [num_tokens, hidden]
    weight: torch.Tensor,  # [hidden]
    eps: float,
    residual: torch.Tensor | None = None,  # [num_tokens, hidden]
    check: bool = True,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Same semantics as reference.rms_norm_ref: out of place; returns normed, or
    (normed, new_residual) when residual is given. Outputs are contiguous, in x's dtype.
    check=False skips the input checks (for a caller that checked the same shapes once)."""
    if check:
        _check_inputs(x, weight, residual)
    num_tokens, hidden = x.shape
    out = torch.empty(num_tokens, hidden, dtype=x.dtype, device=x.device)
    new_residual = torch.empty_like(out) if residual is not None else out
    if num_tokens:
        block = triton.next_power_of_2(hidden)
        _rms_norm_kernel[(num_tokens,)](
            out, new_residual, x, residual if residual is not None else x, weight, eps, hidden,
            x.stride(0), residual.stride(0) if residual is not None else 0,
            HAS_RESIDUAL=residual is not None, BLOCK=block, num_warps=min(16, max(1, block // 256)),
        )  # fmt: skip
    return out if residual is None else (out, new_residual)


def _check_inputs(x, weight, residual) -> None:
    if x.dim() != 2 or weight.shape != (x.shape[1],):
        raise ValueError(
            f"want x [num_tokens, hidden] and weight [hidden], got {tuple(x.shape)}, {tuple(weight.shape)}"
        )
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual {residual.dtype} {tuple(residual.shape)} must match x {x.dtype} {tuple(x.shape)}")
    if x.stride(1) != 1 or weight.stride(0) != 1 or (residual is not None and residual.stride(1) != 1):
        raise ValueError("x, residual and weight need a contiguous hidden dim (stride 1)")
