"""Triton kernels for the live engine, each beside a pure-torch reference in reference.py.

The Triton wrappers are exported only when triton imports; reference.py needs torch alone.
Under TRITON_INTERPRET=1 (set before this package is imported) they run on CPU tensors.
"""

import importlib.util
import os

import torch

HAS_TRITON = importlib.util.find_spec("triton") is not None


def triton_available() -> bool:
    """True when triton imports and can run: a CUDA device, or the CPU interpreter (TRITON_INTERPRET=1)."""
    return HAS_TRITON and (torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1")


if HAS_TRITON:
    from kernels.activation import silu_and_mul
    from kernels.paged_attention import paged_attention
    from kernels.rms_norm import rms_norm
    from kernels.rotary import rotary
    from kernels.store_kv import store_kv

    __all__ = ["paged_attention", "rms_norm", "rotary", "silu_and_mul", "store_kv", "triton_available"]
else:
    __all__ = ["triton_available"]
