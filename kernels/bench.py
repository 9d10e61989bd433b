"""Kernel benchmark: `python -m planner_kernels.bench`.

Times each kernel (triton.testing.do_bench medians on CUDA; plain wall-clock medians on CPU, where
the kernels run under TRITON_INTERPRET=1 with tiny shapes so that this file stays tested) against
the torch reference and, where comparable, torch's scaled_dot_product_attention on dense K/V.
Bandwidth = bytes the kernel must move / time, shown as a share of the device's measured
device-to-device copy bandwidth (read + write of a large tensor copy).

`--sweep` also times the decode attention kernel under each launch config (TILE_N x num_stages x
num_warps) and prints the best, to be copied into paged_attention_config.DECODE_CONFIG. `--tiny` uses the CPU's
tiny shapes on any device (the tests check the plumbing with it, in seconds on a GPU too); `--json PATH`
writes the figures (gpu_engine.gpu_check reads them).
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
import triton

from planner_kernels.paged_attention import _launch, paged_attention
from planner_kernels.paged_attention_config import DECODE_CONFIG, LaunchConfig, _choose_num_splits
from planner_kernels.reference import paged_attention_ref, rms_norm_ref, store_kv_ref
from planner_kernels.rms_norm import rms_norm
from planner_kernels.store_kv import store_kv

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
GPU = DEVICE == "cuda"
TARGETS = {"decode attention": 0.80, "store_kv": 0.70}  # share of copy bandwidth, at least (issue 15)
DECODE_SHAPE = {"num_seqs": 64, "q_len": 1, "context_len": 4096}  # 32 / 8 heads, head_dim 128: Llama-3.1-8B
DECODE_SHAPE_TINY = {"num_seqs": 2, "q_len": 1, "context_len": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 32}
SWEEP = {"tile_n": (16, 32, 64), "num_stages": (1, 2, 3), "num_warps": (2, 4)}


def median_ms(fn, gpu: bool = GPU, quick: bool = False) -> float:
    if gpu:  # quick: a few ms of repetitions (plumbing checks), not a measurement
        return triton.testing.do_bench(fn, warmup=5 if quick else 25, rep=5 if quick else 100, return_mode="median")
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


def sweep_decode_attention(shape: dict, copy_gbs: float, quick: bool = False) -> tuple[LaunchConfig, list[dict]]:
    """Time every launch config of SWEEP on the decode case (its own split count each); print them, return
    the fastest and the rows."""
    _, num_bytes, _ = bench_attention("decode attention", **shape)
    args = paged_inputs(shape["num_seqs"], 1, shape["context_len"], shape.get("num_heads", 32),
                        shape.get("num_kv_heads", 8), shape.get("head_dim", 128), 16, torch.bfloat16)  # fmt: skip
    query, k_cache, block_tables, num_seqs = args[0], args[1], args[3], shape["num_seqs"]
    print(f"\ndecode attention sweep (current {DECODE_CONFIG}):")
    print(f"{'tile_n':>7}{'stages':>7}{'warps':>6}{'splits':>7}{'median ms':>11}{'% copy':>8}")
    results, rows = [], []
    for tile_n, num_stages, num_warps in itertools.product(*SWEEP.values()):
        config = LaunchConfig(DECODE_CONFIG.block_m, tile_n, num_warps, num_stages)
        splits = _choose_num_splits(query, k_cache, block_tables, num_seqs, True, tile_n)
        ms = median_ms(lambda: _launch(*args, num_splits=splits, config=config), quick=quick)  # noqa: B023
        results.append((ms, config))
        rows.append({"tile_n": tile_n, "num_stages": num_stages, "num_warps": num_warps, "splits": splits, "ms": ms,
                     "copy_share": num_bytes / ms / 1e6 / copy_gbs})  # fmt: skip
        print(f"{tile_n:>7}{num_stages:>7}{num_warps:>6}{splits:>7}{ms:>11.3f}{num_bytes / ms / 1e6 / copy_gbs:>8.0%}")
    ms, best = min(results, key=lambda r: r[0])
    print(f"best: {best} at {ms:.3f} ms ({num_bytes / ms / 1e6 / copy_gbs:.0%} of copy bandwidth)")
    return best, rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m planner_kernels.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="also sweep the decode attention launch config")
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, quick timings, on any device")
    parser.add_argument("--json", help="also write the figures to this file")
    opts = parser.parse_args(argv)
    if not GPU and os.environ.get("TRITON_INTERPRET") != "1":
        # the kernels were decorated for a GPU when kernels/ was imported: restart interpreted
        os.execve(sys.executable, [sys.executable, "-m", "planner_kernels.bench", *sys.argv[1:]],
                  {**os.environ, "TRITON_INTERPRET": "1"})  # fmt: skip
    full = GPU and not opts.tiny
    decode = DECODE_SHAPE if full else DECODE_SHAPE_TINY
    if full:
        cases = [
            bench_attention("decode attention", **decode),
            bench_attention("prefill attention", num_seqs=4, q_len=2048, context_len=2048),
            bench_store_kv(num_tokens=65536),
            bench_rms_norm(num_tokens=16384, hidden=4096),
        ]
    else:
        cases = [
            bench_attention("decode attention", **decode),
            bench_attention("prefill attention", 1, 32, 32, num_heads=4, num_kv_heads=2, head_dim=32),
            bench_store_kv(num_tokens=64, num_kv_heads=2, head_dim=32),
            bench_rms_norm(num_tokens=8, hidden=256),
        ]
    copy_gbs = copy_bandwidth_gbs()
    where = torch.cuda.get_device_name() if GPU else "CPU, Triton interpreter (timings say nothing about GPUs)"
    print(f"device: {where}; measured copy bandwidth {copy_gbs:.0f} GB/s")
    print(f"{'case':<22}{'impl':<12}{'median ms':>11}{'GB/s':>9}{'% copy':>8}  target")
    figures = {"device": where, "full_size": full, "copy_bandwidth_gbs": copy_gbs, "cases": [], "sweep": None}
    for name, num_bytes, impls in cases:
        for impl, fn in impls.items():
            ms = median_ms(fn, quick=not full)
            gbs = num_bytes / ms / 1e6
            target = TARGETS.get(name) if impl == "triton" and full else None
            verdict = "" if target is None else f">= {target:.0%} {'met' if gbs / copy_gbs >= target else 'MISSED'}"
            print(f"{name:<22}{impl:<12}{ms:>11.3f}{gbs:>9.1f}{gbs / copy_gbs:>8.0%}  {verdict}")
            figures["cases"].append({"case": name, "impl": impl, "ms": ms, "gbs": gbs, "copy_share": gbs / copy_gbs,
                                     "target_min_copy_share": target})  # fmt: skip
    if opts.sweep:
        best, rows = sweep_decode_attention(decode, copy_gbs, quick=not full)
        figures["sweep"] = {"best": vars(best), "rows": rows}
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
