"""Host time of the eager decode path, on CPU: `python -m gpu_engine.host_bench`.

What it measures: the Python wrapper of each kernel plus Triton's dispatch (argument binding, the
specialisation key, the compiled-kernel cache lookup, the launch-metadata call), with only the final C
launch (cuLaunchKernel, a few us on a GPU) stubbed out, on CPU tensors (torch.empty from the CPU
allocator rather than CUDA's caching one: both ~1 us). No GPU is needed: a stand-in Triton driver reports
an sm_90 target and the "compiled" kernels are stubs whose run() does nothing. Per layer: one DecoderLayer.forward
at batch-1 decode, at tiny-llama's sizes in float32 so that its four linears (real CPU GEMMs, tiny) cost
little beyond their dispatch; the kernel wrappers' host work does not depend on sizes.

"before": every layer's kernels check their inputs (the engine before issue 15); "after": the first layer
checks, the rest call the unchecked kernels (KernelOps.unchecked). On a GPU a decode step under CUDA graphs
costs none of this per layer: only the replay and the input copies (gpu_engine.bench's host time figure).
Timings on a shared CPU are noisy: each figure is the fastest of many repetitions (as timeit advises: the
slower ones measure the other processes).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch

from gpu_engine.compile_recording import _StandInDriver


class _StubKernel:
    """Stands for a compiled kernel: Triton's run() calls these two, and nothing reaches a device."""

    function = packed_metadata = None

    def launch_metadata(self, *args):
        return None

    def run(self, *args):
        return None


@contextmanager
def stubbed_launches():
    """Triton launches go through their whole Python dispatch and stop before the C launcher."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    def do_compile(self, key, signature, device, constexprs, options, attrs, warmup):
        kernel = self.device_caches[device][0][key] = _StubKernel()  # a cache hit from the next call on
        return kernel

    saved, saved_driver = JITFunction._do_compile, driver._active
    driver.set_active(_StandInDriver())
    JITFunction._do_compile = do_compile
    try:
        yield
    finally:
        JITFunction._do_compile = saved
        driver._active = saved_driver


def best_us(fn: Callable[[], object], repeats: int, inner: int = 50) -> float:
    fn()  # first call: the stub "compile"
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner * 1e6)
    return min(times)


def kernel_calls(spec, dtype: torch.dtype) -> dict[str, tuple[Callable, Callable]]:
    """name -> (checked call, unchecked call), with a batch-1 decode step's shapes."""
    import dataclasses

    from gpu_engine.runner import allocate_kv_caches
    from planner_kernels.activation import silu_and_mul
    from planner_kernels.paged_attention import paged_attention
    from planner_kernels.rms_norm import rms_norm
    from planner_kernels.rotary import rotary
    from planner_kernels.store_kv import store_kv

    meta = {"device": "cpu", "dtype": dtype}
    h, kvh, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    x = torch.empty(1, spec.hidden_size, **meta)
    weight = torch.empty(spec.hidden_size, **meta)
    qkv = torch.empty(1, h + 2 * kvh, d, **meta)
    q, k, v = qkv[:, :h], qkv[:, h : h + kvh], qkv[:, h + kvh :]
    k_cache, v_cache = allocate_kv_caches(dataclasses.replace(spec, num_hidden_layers=1), 64, 16, dtype, "cpu")[0]
    ints = {"device": "cpu", "dtype": torch.int32}
    block_tables, seq_lens, qsl = torch.empty(1, 32, **ints), torch.empty(1, **ints), torch.empty(2, **ints)
    positions, slots = torch.empty(1, **ints), torch.empty(1, **ints)
    cos_sin = torch.empty(4096, d, **meta)
    gate_up = torch.empty(1, 2 * spec.intermediate_size, **meta)

    def attention(c: bool) -> torch.Tensor:
        return paged_attention(q, k_cache, v_cache, block_tables, seq_lens, qsl, 0.1, max_query_len=1, check=c)

    calls = {
        "paged_attention": attention,
        "store_kv": lambda c: store_kv(k, v, k_cache, v_cache, slots, check=c),
        "rms_norm + residual": lambda c: rms_norm(x, weight, 1e-5, x, check=c),
        "rotary": lambda c: rotary(positions, q, k, cos_sin, check=c),
        "silu_and_mul": lambda c: silu_and_mul(gate_up, check=c),
    }
    return {name: (lambda f=f: f(True), lambda f=f: f(False)) for name, f in calls.items()}


def layer_forward_us(spec, trimmed: bool, repeats: int) -> float:  # spec: a tiny model
    """Host us of one DecoderLayer.forward at batch-1 decode, as the model calls its layers after the first:
    with the checked kernels (before issue 15, every layer) or the unchecked ones (after). float32, so that
    the four small CPU linears cost little beyond their dispatch."""
    from gpu_engine.attention import AttentionMetadata, triton_ops
    from gpu_engine.model import build_model
    from gpu_engine.runner import allocate_kv_caches

    ops = triton_ops()
    ops = ops.fast if trimmed else ops
    ints = {"device": "cpu", "dtype": torch.int32}
    attn = AttentionMetadata(torch.zeros(1, **ints), torch.zeros(1, 32, **ints), torch.ones(1, **ints),
                             torch.arange(2, **ints), 1, torch.zeros(1, **ints))  # fmt: skip
    model = build_model(spec, torch.float32, "cpu")
    cache = allocate_kv_caches(spec, 64, 16, torch.float32, "cpu")[0]
    layer, cos_sin = model.layers[0], model.cos_sin_cache
    x = torch.zeros(1, spec.hidden_size)
    positions = torch.zeros(1, **ints)
    with torch.inference_mode():
        return best_us(lambda: layer(positions, x, x, cache, attn, cos_sin, ops), repeats, inner=20)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_engine.host_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.1-8b", help="catalog model whose shapes to use")
    parser.add_argument("--repeats", type=int, default=30, help="timed repetitions (the fastest counts)")
    opts = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("error: run without TRITON_INTERPRET=1 (it times Triton's GPU dispatch)", file=sys.stderr)
        return 2
    from planner.catalog import load_model_catalog

    spec = load_model_catalog()[opts.model]
    dtype = torch.bfloat16
    print(f"host time per call, {opts.model} shapes, batch-1 decode; Python wrapper + Triton dispatch, launch "
          f"stubbed, CPU tensors (CPU: {os.cpu_count()} cores, shared: noisy)")  # fmt: skip
    with stubbed_launches():
        print(f"{'kernel':<22}{'checked us':>12}{'unchecked us':>14}")
        total = [0.0, 0.0]
        for name, (checked, unchecked) in kernel_calls(spec, dtype).items():
            us = best_us(checked, opts.repeats), best_us(unchecked, opts.repeats)
            n = 2 if name.startswith("rms_norm") else 1
            total = [total[0] + n * us[0], total[1] + n * us[1]]
            print(f"{name:<22}{us[0]:>12.1f}{us[1]:>14.1f}" + ("   (x2 per layer)" if n == 2 else ""))
        print(f"{'kernels of one layer':<22}{total[0]:>12.1f}{total[1]:>14.1f}")
        tiny = load_model_catalog()["tiny-llama"]
        before = layer_forward_us(tiny, trimmed=False, repeats=opts.repeats)
        after = layer_forward_us(tiny, trimmed=True, repeats=opts.repeats)
    print(f"one decoder layer's forward (tiny-llama sizes: the kernels + 4 small CPU linears and the views), us: "
          f"before {before:.1f} (checked kernels), after {after:.1f} (unchecked: layers after the first)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
