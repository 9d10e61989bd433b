"""Kernel benchmark: `python -m kernels.bench`.

Times each kernel (triton.testing.do_bench medians on CUDA; plain wall-clock medians on CPU, where
the kernels run under TRITON_INTERPRET=1 with tiny shapes so that this file stays tested) against
the torch reference and, where comparable, torch's scaled_dot_product_attention on dense K/V.
Bandwidth = bytes the kernel must move / time, shown as a share of the device's measured
device-to-device copy bandwidth (read + write of a large tensor copy).
"""

import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton

from kernels.paged_attention import paged_attention
from kernels.reference import paged_attention_ref, rms_norm_ref, store_kv_ref
from kernels.rms_norm import rms_norm
from kernels.store_kv import store_kv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
GPU = DEVICE == "cuda"
TARGETS = {"decode attention": 0.70, "store_kv": 0.60}  # share of copy bandwidth (issue 5)


def median_ms(fn, gpu: bool = GPU) -> float:
    if gpu:
        return triton.testing.do_bench(fn, return_mode="median")
    fn()  # warm-up
    times = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def copy_bandwidth_gbs(device: str = DEVICE) -> float:
    """Bytes read + written per second by a large device-to-device copy: the roof a kernel is held to."""
    gpu = torch.device(device).type == "cuda"
    num_bytes = 2**30 if gpu else 2**26
    src = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * num_bytes / median_ms(lambda: dst.copy_(src), gpu) / 1e6


def paged_inputs(num_seqs, q_len, context_len, num_heads, num_kv_heads, head_dim, block_size, dtype):
    blocks_per_seq = triton.cdiv(context_len, block_size)
    num_blocks = num_seqs * blocks_per_seq
    k_cache = torch.randn(num_blocks, block_size, num_kv_heads, head_dim, device=DEVICE, dtype=dtype)
    v_cache = torch.randn_like(k_cache)
    block_tables = torch.randperm(num_blocks, device=DEVICE).view(num_seqs, blocks_per_seq).int()
    query = torch.randn(num_seqs * q_len, num_heads, head_dim, device=DEVICE, dtype=dtype)
    seq_lens = torch.full((num_seqs,), context_len, dtype=torch.int32, device=DEVICE)
    query_start_loc = torch.arange(0, num_seqs * q_len + 1, q_len, dtype=torch.int32, device=DEVICE)
    return query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, head_dim**-0.5


def bench_attention(name, num_seqs, q_len, context_len, num_heads=32, num_kv_heads=8, head_dim=128):
    args = paged_inputs(num_seqs, q_len, context_len, num_heads, num_kv_heads, head_dim, 16, torch.bfloat16)
    query, k_cache = args[0], args[1]
    kv_bytes = 2 * num_seqs * context_len * num_kv_heads * head_dim * k_cache.element_size()
    num_bytes = kv_bytes + 2 * query.numel() * query.element_size()  # K/V read, query read, out written
    # dense, unpaged equivalent for SDPA: [num_seqs, heads, len, head_dim]
    q_dense = query.view(num_seqs, q_len, num_heads, head_dim).transpose(1, 2)
    k_dense = torch.randn(num_seqs, num_kv_heads, context_len, head_dim, device=DEVICE, dtype=query.dtype)
    v_dense = torch.randn_like(k_dense)
    causal = q_len == context_len

    def sdpa():
        return F.scaled_dot_product_attention(q_dense, k_dense, v_dense, is_causal=causal, enable_gqa=True)

    max_query_len = q_len
    return name, num_bytes, {
        "triton": lambda: paged_attention(*args, max_query_len=max_query_len),
        "torch ref": lambda: paged_attention_ref(*args),
        "sdpa dense": sdpa,
    }  # fmt: skip


def bench_store_kv(num_tokens, num_kv_heads=8, head_dim=128, block_size=16):
    key = torch.randn(num_tokens, num_kv_heads, head_dim, device=DEVICE, dtype=torch.bfloat16)
    value = torch.randn_like(key)
    k_cache = torch.empty(num_tokens // block_size, block_size, num_kv_heads, head_dim, device=DEVICE, dtype=key.dtype)
    v_cache = torch.empty_like(k_cache)
    slots = torch.randperm(num_tokens, device=DEVICE)
    num_bytes = 4 * key.numel() * key.element_size()  # read key, value; write both
    return "store_kv", num_bytes, {
        "triton": lambda: store_kv(key, value, k_cache, v_cache, slots),
        "torch ref": lambda: store_kv_ref(key, value, k_cache, v_cache, slots),
    }  # fmt: skip


def bench_rms_norm(num_tokens, hidden):
    x = torch.randn(num_tokens, hidden, device=DEVICE, dtype=torch.bfloat16)
    residual, weight = torch.randn_like(x), torch.randn(hidden, device=DEVICE, dtype=x.dtype)
    num_bytes = 4 * x.numel() * x.element_size()  # read x, residual; write normed, new residual
    return "rms_norm + residual", num_bytes, {
        "triton": lambda: rms_norm(x, weight, 1e-6, residual),
        "torch ref": lambda: rms_norm_ref(x, weight, 1e-6, residual),
    }  # fmt: skip


def main() -> None:
    if not GPU and os.environ.get("TRITON_INTERPRET") != "1":
        # the kernels were decorated for a GPU when kernels/ was imported: restart interpreted
        os.execve(sys.executable, [sys.executable, "-m", "kernels.bench", *sys.argv[1:]],
                  {**os.environ, "TRITON_INTERPRET": "1"})  # fmt: skip
    if GPU:
        cases = [
            bench_attention("decode attention", num_seqs=64, q_len=1, context_len=4096),
            bench_attention("prefill attention", num_seqs=4, q_len=2048, context_len=2048),
            bench_store_kv(num_tokens=65536),
            bench_rms_norm(num_tokens=16384, hidden=4096),
        ]
    else:
        cases = [
            bench_attention("decode attention", 2, 1, 64, num_heads=4, num_kv_heads=2, head_dim=32),
            bench_attention("prefill attention", 1, 32, 32, num_heads=4, num_kv_heads=2, head_dim=32),
            bench_store_kv(num_tokens=64, num_kv_heads=2, head_dim=32),
            bench_rms_norm(num_tokens=8, hidden=256),
        ]
    copy_gbs = copy_bandwidth_gbs()
    where = torch.cuda.get_device_name() if GPU else "CPU, Triton interpreter (timings say nothing about GPUs)"
    print(f"device: {where}; measured copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'case':<22}{'impl':<12}{'median ms':>11}{'GB/s':>9}{'% copy':>8}  target")
    for name, num_bytes, impls in cases:
        for impl, fn in impls.items():
            ms = median_ms(fn)
            gbs = num_bytes / ms / 1e6
            target = TARGETS.get(name) if impl == "triton" and GPU else None
            verdict = "" if target is None else f">= {target:.0%} {'met' if gbs / copy_gbs >= target else 'MISSED'}"
            print(f"{name:<22}{impl:<12}{ms:>11.3f}{gbs:>9.1f}{gbs / copy_gbs:>8.0%}  {verdict}")


if __name__ == "__main__":
    main()
