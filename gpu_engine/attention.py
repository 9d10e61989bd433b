"""Paged attention for a flat packed batch: the metadata one step carries, the one call every layer makes,
and the one place that picks the kernels a forward runs (Triton on CUDA, the torch references elsewhere).

The batch is vLLM v1's: the new tokens of every scheduled request back to back, prefill chunks and decode
tokens mixed, no padding. Each layer writes its new K/V into the cache, then attends over the cache, so a
request's context (earlier steps + this step's tokens) is always read from the paged cache.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, partial

import torch

from planner_kernels.reference import paged_attention_ref, rms_norm_ref, rotary_ref, silu_and_mul_ref, store_kv_ref


@dataclass(frozen=True)
class AttentionMetadata:
    """Built once per step by the runner, shared by every layer (passed down, never global)."""

    slot_mapping: torch.Tensor  # [num_tokens] int32: cache slot of each new token, -1 = skip
    block_tables: torch.Tensor  # [num_seqs, max_blocks] int32, padded with 0 past a sequence's blocks
    seq_lens: torch.Tensor  # [num_seqs] int32: context length including this step's tokens
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32: sequence i's tokens are rows [loc[i], loc[i+1])
    max_query_len: int  # 1 = a pure decode step (the kernel's decode config and split-context path)
    logits_indices: torch.Tensor  # [num_sampled] int32: rows whose logits are computed (last token of each)


@dataclass(frozen=True)
class KernelOps:
    """The kernels a forward calls; the Triton set and the torch set share every signature and result
    (kernels/reference.py says what each computes)."""

    paged_attention: Callable  # (query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale,
    #                             max_query_len=, sliding_window=) -> out
    store_kv: Callable  # (key, value, k_cache, v_cache, slot_mapping), in place
    rms_norm: Callable  # (x, weight, eps, residual=None) -> normed | (normed, new_residual)
    rotary: Callable  # (positions, q, k, cos_sin_cache), in place
    silu_and_mul: Callable  # (gate_up) -> silu(gate) * up
    # the same kernels without their input checks, for the layers after the first: every layer's inputs have
    # the same shapes, dtypes and devices, so the model checks once per step (None: no such set)
    unchecked: KernelOps | None = None

    @property
    def fast(self) -> KernelOps:
        return self.unchecked or self


def _paged_attention_torch(*args, max_query_len: int | None = None, sliding_window: int = 0) -> torch.Tensor:
    return paged_attention_ref(*args, sliding_window=sliding_window)  # max_query_len: the Triton launch hint


TORCH_OPS = KernelOps(_paged_attention_torch, store_kv_ref, rms_norm_ref, rotary_ref, silu_and_mul_ref)


@cache
def triton_ops() -> KernelOps:
    """The Triton kernels (on CPU tensors they need TRITON_INTERPRET=1, set before kernels/ is imported)."""
    from planner_kernels.activation import silu_and_mul
    from planner_kernels.paged_attention import paged_attention
    from planner_kernels.rms_norm import rms_norm
    from planner_kernels.rotary import rotary
    from planner_kernels.store_kv import store_kv

    kernels = (paged_attention, store_kv, rms_norm, rotary, silu_and_mul)
    return KernelOps(*kernels, unchecked=KernelOps(*(partial(k, check=False) for k in kernels)))


@cache
def _triton_ops(device_type: str) -> KernelOps | None:
    """The Triton kernels on CUDA when triton imports, else None (the torch references).

    CUDA without triton still runs, on the torch references, whose attention loops over the sequences in
    Python with a host sync each: correct but ~100x slower, so a warning says so (once per process) rather
    than an error, which would stop correctness runs on such a machine too.
    """
    if device_type != "cuda":
        return None
    from planner_kernels.availability import triton_available

    if not triton_available():
        warnings.warn(
            "CUDA device but triton is not installed: the live engine falls back to the torch reference"
            " attention (a Python loop per sequence with host syncs), ~100x slower than the Triton kernels;"
            " its timings are not measurements of the engine. `pip install triton` to fix.",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return triton_ops()


def kernel_ops(device_type: str) -> KernelOps:
    """The kernels a forward on this device type runs (tests swap in Triton by patching _triton_ops)."""
    return _triton_ops(device_type) or TORCH_OPS


def attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    key: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    value: torch.Tensor,  # [num_tokens, num_kv_heads, head_dim]
    kv_cache: tuple[torch.Tensor, torch.Tensor],  # k, v: [num_blocks, block_size, num_kv_heads, head_dim]
    attn: AttentionMetadata,
    scale: float,
    ops: KernelOps,
    sliding_window: int = 0,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Store this step's K/V at attn.slot_mapping, then causal attention of each query over its cache (over
    the last sliding_window positions only, when > 0)."""
    k_cache, v_cache = kv_cache
    ops.store_kv(key, value, k_cache, v_cache, attn.slot_mapping)
    return ops.paged_attention(
        query,
        k_cache,
        v_cache,
        attn.block_tables,
        attn.seq_lens,
        attn.query_start_loc,
        scale,
        max_query_len=attn.max_query_len,
        sliding_window=sliding_window,
    )
