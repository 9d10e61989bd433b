"""SwiGLU's activation, silu(gate) * up, on the fused gate_up projection's output (vLLM's silu_and_mul).

One program per (token, BLOCK columns): reads the gate and up halves of a row once, writes the product.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _silu_and_mul_kernel(
    out_ptr,  # [num_tokens, d]
    x_ptr,  # [num_tokens, 2 * d]: gate, then up
    d,
    stride_xt,
    stride_ot,
    BLOCK: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < d
    dtype = out_ptr.dtype.element_ty
    gate = tl.load(x_ptr + token * stride_xt + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + token * stride_xt + d + cols, mask=mask, other=0.0).to(tl.float32)
    # silu rounded to the model's dtype before the product, as HF's act_fn(gate) * up
    silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    tl.store(out_ptr + token * stride_ot + cols, (silu * up).to(dtype), mask=mask)


def silu_and_mul(x: torch.Tensor, check: bool = True) -> torch.Tensor:  # x: [num_tokens, 2 * d] -> [num_tokens, d]
    """Same semantics as reference.silu_and_mul_ref. check=False skips the input check."""
    if check and (x.dim() != 2 or x.shape[1] % 2 or x.stride(1) != 1):
        raise ValueError(f"want x [num_tokens, 2 * d] with a contiguous last dim, got {tuple(x.shape)}")
    num_tokens, d = x.shape[0], x.shape[1] // 2
    out = torch.empty(num_tokens, d, dtype=x.dtype, device=x.device)
    if num_tokens:
        block = min(1024, triton.next_power_of_2(d))
        _silu_and_mul_kernel[(num_tokens, triton.cdiv(d, block))](
            out, x, d, x.stride(0), out.stride(0), BLOCK=block, num_warps=4
        )
    return out
