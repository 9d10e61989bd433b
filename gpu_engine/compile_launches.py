"""The variants the compile check (gpu_engine.compile_check) compiles: the launches the live engine's
forward and the kernel tests make on a GPU, run on `meta` tensors under compile_recording.recording.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

from gpu_engine.compile_recording import Variant, recording

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def engine_geometries() -> dict[str, object]:
    """Every distinct catalog model shape the kernels see, plus head_dim 64 and 256 (HF configs may add such)
    and a sliding window (no catalog model the engine runs has one)."""
    import dataclasses

    from planner.catalog import load_model_catalog

    specs: dict[tuple, tuple[str, object]] = {}
    for key, spec in load_model_catalog().items():
        if spec.live_engine_unsupported():
            continue  # the live engine refuses it: nothing of it is ever launched
        if spec.is_moe:  # the experts' MLP is a dense one of the expert's width, run per expert (torch routing
            # is data-dependent, which meta tensors cannot run): record its kernels through that dense shape
            spec = dataclasses.replace(spec, num_experts=0, num_experts_per_tok=0, dense_layers=(),
                                       intermediate_size=spec.moe_intermediate_size)  # fmt: skip
        shape = (spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim, spec.hidden_size,
                 spec.intermediate_size, spec.qk_norm)  # fmt: skip
        specs.setdefault(shape, (key, spec))
    llama = load_model_catalog()["llama-3.1-8b"]
    specs["hd64"] = ("llama-3.1-8b@head_dim=64", dataclasses.replace(llama, head_dim=64))
    specs["hd256"] = ("llama-3.1-8b@head_dim=256", dataclasses.replace(llama, head_dim=256))
    # a window is a constexpr of the attention kernel: Mistral-7B-v0.1's shape (Llama-3.1-8B's) and window
    window = dataclasses.replace(llama, sliding_window=4096, sliding_layers=tuple(range(llama.num_hidden_layers)))
    specs["window"] = ("llama-3.1-8b@sliding_window=4096", window)
    return dict(specs.values())


def engine_forwards(spec, dtype: torch.dtype, block_size: int) -> None:
    """The engine's forward on meta tensors: one mixed prefill step, one decode step, the split path."""
    from unittest import mock

    import gpu_engine.model
    from gpu_engine.attention import triton_ops
    from gpu_engine.model import build_model
    from gpu_engine.runner import allocate_kv_caches, build_batch
    from planner_kernels.paged_attention import compile_split_path
    from sim.request import Request

    spec = _one_layer(spec)
    model = build_model(spec, dtype, "meta")
    caches = allocate_kv_caches(spec, 64, block_size, dtype, "meta")
    requests = [Request(i, 0.0, n, 4, prompt_token_ids=[1] * n) for i, n in enumerate((5, 1, 3 * block_size))]
    for r in requests:
        r.block_ids = list(range(4 * r.request_id, 4 * r.request_id + -(-r.num_tokens // block_size)))
    ops = triton_ops()
    with mock.patch.object(gpu_engine.model, "kernel_ops", lambda device_type: ops):
        for decode in (False, True):  # a prefill step (every prompt whole), then a decode step
            for r in requests:
                r.num_computed_tokens = r.num_tokens - 1 if decode else 0
            batch = build_batch([(r, r.num_tokens - r.num_computed_tokens) for r in requests], block_size, "meta")
            model(batch.input_ids, batch.positions, batch.attn, caches)
    compile_split_path(spec.num_attention_heads, *caches[0])
    if spec.num_sliding_layers:  # as the runner: the windowed split path too
        compile_split_path(spec.num_attention_heads, *caches[0], spec.sliding_window)


def _one_layer(spec):
    import dataclasses

    return dataclasses.replace(spec, num_hidden_layers=1, vocab_size=min(spec.vocab_size, 1024))


def _paged(q_lens_and_seq_lens, num_heads, num_kv_heads, head_dim, block_size, dtype, slot_dtype=torch.int32):
    """Meta tensors shaped as tests/kernels' make_case builds them."""
    num_seqs = len(q_lens_and_seq_lens)
    width = max(-(-s // block_size) for _, s in q_lens_and_seq_lens)
    num_tokens = sum(q for q, _ in q_lens_and_seq_lens)
    meta = {"device": "meta"}
    k_cache = torch.empty(2 * num_seqs * width + 1, block_size, num_kv_heads, head_dim, dtype=dtype, **meta)
    return (
        torch.empty(num_tokens, num_heads, head_dim, dtype=dtype, **meta),
        k_cache,
        torch.empty_like(k_cache),
        torch.empty(num_seqs, width, dtype=slot_dtype, **meta),
        torch.empty(num_seqs, dtype=torch.int32, **meta),
        torch.empty(num_seqs + 1, dtype=torch.int32, **meta),
        head_dim**-0.5,
    )


DECODE = [(1, 1), (1, 15), (1, 16), (1, 17), (1, 4097)]  # tests/kernels/test_paged_attention.py, FULL
MIXED = [(1, 33), (7, 7), (5, 40), (16, 17), (1, 1), (3, 4097)]


# (BLOCK_M, TILE_N, warps) launches other than the chosen configs, that the kernel must also get right:
# tests/kernels/test_paged_attention.py::test_launch_configs runs them, the compile check compiles them. 8 warps
# at BLOCK_M 128: with 4, sm_80 spills (255 registers, 8 B a thread).
LAUNCH_CONFIG_SWEEP = ((16, 32, 4), (64, 16, 4), (128, 16, 8))


def kernel_test_launches() -> Iterator[tuple[str, str, Callable[[], None]]]:
    """(dtype, where, launch) for the GPU-size launches of tests/kernels (FULL=True: HEAD_DIM 128)."""
    from planner_kernels.activation import silu_and_mul
    from planner_kernels.paged_attention import _launch, compile_split_path, paged_attention
    from planner_kernels.paged_attention_config import LaunchConfig
    from planner_kernels.rms_norm import rms_norm
    from planner_kernels.rotary import rotary
    from planner_kernels.store_kv import store_kv

    meta = {"device": "meta"}
    for name, dtype in DTYPES.items():
        for lens, kind in ((DECODE, "decode"), (MIXED, "mixed")):
            yield name, f"test_dtypes[{kind}]", lambda d=dtype, ls=lens: paged_attention(*_paged(ls, 8, 2, 128, 16, d))
        for slot_dtype in (torch.int32, torch.int64):

            def kv(d=dtype, s=slot_dtype):
                key = torch.empty(40, 6, 128, dtype=d, **meta)
                cache = torch.empty(16, 8, 3, 128, dtype=d, **meta)
                store_kv(key[:, :3], key[:, 3:], cache, torch.empty_like(cache), torch.empty(40, dtype=s, **meta))

            yield name, "test_store_kv", kv
        for residual in (False, True):

            def norm(d=dtype, r=residual):
                x = torch.empty(7, 4096, dtype=d, **meta)
                rms_norm(x, torch.empty(4096, dtype=d, **meta), 1e-6, torch.empty_like(x) if r else None)

            yield name, "test_rms_norm", norm
        for rot_dim in (128, 64):

            def rot(d=dtype, rd=rot_dim):
                qkv = torch.empty(6, 10, 128, dtype=d, **meta)
                rotary(torch.empty(6, dtype=torch.int64, **meta), qkv[:, :6], qkv[:, 6:8],
                       torch.empty(30001, rd, dtype=d, **meta))  # fmt: skip

            yield name, "test_rotary_in_place", rot
        for d_ff in (512, 1500):
            yield (
                name,
                "test_silu_and_mul",
                lambda d=dtype, n=d_ff: silu_and_mul(torch.empty(5, 2 * n, dtype=d, **meta)),
            )
    fp16 = torch.float16
    for heads in ((4, 4), (8, 2), (16, 2)):
        for block_size in (8, 32):
            yield (
                "fp16",
                "test_gqa_and_block_sizes",
                lambda h=heads, b=block_size: paged_attention(*_paged(MIXED, *h, 128, b, fp16)),
            )
    for head_dim in (64, 40):
        yield (
            "fp16",
            "test_head_dims",
            lambda hd=head_dim: paged_attention(*_paged([(1, 20), (6, 30)], 4, 2, hd, 16, fp16)),
        )
    for window in (1, 7, 16, 40):
        for lens in (DECODE, MIXED):
            yield (
                "fp16",
                "test_sliding_window",
                lambda w=window, ls=lens: paged_attention(*_paged(ls, 8, 2, 128, 16, fp16), sliding_window=w),
            )
    yield (
        "bf16",
        "test_sliding_window_split_context_path",
        lambda: _launch(
            *_paged(DECODE, 8, 2, 128, 16, torch.bfloat16),
            num_splits=2,
            config=LaunchConfig(16, 16, 4, 1),
            sliding_window=24,
        ),
    )
    for lens in (DECODE, MIXED):
        yield (
            "bf16",
            "test_split_context_path",
            lambda ls=lens: _launch(
                *_paged(ls, 8, 2, 128, 16, torch.bfloat16), num_splits=2, config=LaunchConfig(16, 16, 4, 1)
            ),
        )
    for block_m, tile_n, num_warps in LAUNCH_CONFIG_SWEEP:
        yield (
            "fp16",
            "test_launch_configs",
            lambda m=block_m, n=tile_n, w=num_warps: _launch(
                *_paged(MIXED, 8, 2, 128, 16, fp16), num_splits=1, config=LaunchConfig(m, n, w, 2)
            ),
        )
    yield (
        "fp16",
        "test_large_num_blocks_index_overflow",
        lambda: paged_attention(*_paged([(1, 17), (4, 20)], 4, 1, 16, 8, fp16)),
    )
    yield (
        "bf16",
        "test_compile_split_path",
        lambda: compile_split_path(8, *torch.empty(2, 4, 16, 2, 128, dtype=torch.bfloat16, **meta)),
    )


def record_variants(arch: int, everything: bool) -> list[Variant]:
    """The distinct variants the engine and the kernel tests launch on a GPU of this arch (launch configs
    may depend on it). everything=False (the CI set): bf16, the engine's default dtype, for every geometry;
    fp16 and fp32 on Llama-3.1-8B's; block sizes 8 and 32 on Llama-3.1-8B's in bf16. everything=True: every
    dtype for every geometry. The dtype and the block size only change constexprs that no geometry
    interacts with, and each paged-attention variant costs ~2 s of compiling."""
    from gpu_engine.runner import torch_dtype
    from planner.catalog import load_model_catalog

    variants: dict[Variant, Variant] = {}

    def keep(found: list[Variant]) -> None:
        for v in found:
            variants.setdefault(v, v)

    with recording(arch) as take:
        for key, spec in engine_geometries().items():
            main_shape = key == "llama-3.1-8b"
            for name, dtype in DTYPES.items():
                if not (everything or main_shape or name == "bf16"):
                    continue
                for block_size in (8, 16, 32) if main_shape and name == "bf16" else (16,):
                    engine_forwards(spec, dtype, block_size)
                    keep(take(name, f"engine {key} block_size={block_size}"))
        # the engine tests' CUDA run (tests/test_engine_parity.py): tiny-llama, float32, block size 4
        engine_forwards(load_model_catalog()["tiny-llama"], torch_dtype("float32"), 4)
        keep(take("fp32", "engine test_engine_parity"))
        for name, where, launch in kernel_test_launches():
            launch()
            keep(take(name, where))
    return list(variants)


def ci_set(variants: list[Variant], arch: int) -> list[Variant]:
    """What the pytest run compiles within its time: everything for sm_90 (the H100/H200 this engine is
    tuned for); for sm_80 the engine's bf16 variants. `--all` compiles everything for both."""
    if arch >= 90:
        return variants
    return [v for v in variants if v.dtype == "bf16" and v.where.startswith("engine")]
