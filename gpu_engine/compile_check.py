"""Ahead-of-time compile check of every Triton kernel variant, for sm_90 and sm_80, without a GPU:
`python -m gpu_engine.compile_check` (exit 1 on a finding; tests/kernels/test_compile_check.py runs it).

1. Record the variants. A stand-in Triton driver reports GPUTarget('cuda', 90, 32) (then 80) and
   JITFunction._do_compile is replaced by a recorder that returns None, so a launch binds its arguments as
   on a GPU (dtypes, 16-divisibility of pointers and ints, constexprs, num_warps/num_stages, launch configs
   chosen for that arch) and launches nothing. Under it run, on `meta` tensors (shapes without storage):
   the live engine's forward (gpu_engine.model) for every catalog model geometry plus head_dim 64 and 256
   (models an HF config may add), a mixed prefill step, a decode step, the split-context decode path and
   its merge; and the GPU-size launches of the kernel tests (tests/kernels with FULL=True, listed by hand
   in kernel_test_launches, mirroring them). record_variants says which dtypes and block sizes.
2. Compile each distinct variant with Triton's own compiler (`triton.compile(ASTSource(...),
   target=GPUTarget(...))`, the call JITFunction makes) and the ptxas in the triton wheel (TRITON_PTXAS_PATH
   overrides it), two processes at a time.
3. Fail on: a compile error; register spills in a bf16/fp16 variant (when `cuobjdump -res-usage` shows
   local memory, STACK + LOCAL bytes per thread, the figure Triton's `n_spills` reads from the driver,
   ptxas -v is run again on the PTX and its "bytes spill stores/loads" decide: a stack frame without
   spills is printed, not failed; so are fp32 spills, fp32 being the engine's correctness dtype, not its
   speed one); shared memory (metadata.shared) over the target's opt-in limit per block (CUDA programming
   guide, compute capabilities table: 227 KiB on 9.0, 163 KiB on 8.0; of the 228/164 KiB per SM, 1 KiB is
   kept for the system); 32-bit offset arithmetic on a KV-cache pointer (int32_cache_offsets says how).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

MAX_SHARED_BYTES = {90: 227 * 1024, 80: 163 * 1024}  # opt-in shared memory per block
ARCHS = (90, 80)
LOW_PRECISION = ("bf16", "fp16")  # a spill here fails the check


@dataclass(frozen=True)
class Variant:
    """One specialisation of one kernel, as the runtime would compile it."""

    module: str
    name: str
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[tuple[int, ...], object], ...]
    attrs: tuple[tuple[tuple[int, ...], tuple], ...]
    num_warps: int
    num_stages: int
    dtype: str  # the model dtype of the case that launched it (spills fail only in bf16/fp16)
    where: str = field(compare=False, hash=False)  # the first case that launched it

    def label(self) -> str:
        consts = ",".join(f"{self.signature[p[0]][0]}={v}" for p, v in self.constexprs)
        return f"{self.name}[{self.dtype}; {consts}; warps={self.num_warps} stages={self.num_stages}]"


# --- 1. recording ----------------------------------------------------------------------------------------


class _StandInDriver:
    """Enough of Triton's active driver for JITFunction.run to bind arguments: no device is touched."""

    def __init__(self, arch: int = 90):
        self.arch = arch

    def get_current_target(self):
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", self.arch, 32)

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device=None) -> int:
        return 0


@contextmanager
def recording(arch: int = 90) -> Iterator[Callable[[str, str], list[Variant]]]:
    """Within it, Triton launches record their variant instead of compiling and running. Yields
    `take(dtype, where)`, which returns (and forgets) the variants recorded since its last call."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    pending: list[tuple] = []

    def record(self, key, signature, device, constexprs, options, attrs, warmup):
        pending.append((self, signature, constexprs, options, attrs))
        # JITFunction.run returns without launching

    def take(dtype: str, where: str) -> list[Variant]:
        out = [
            Variant(
                module=fn.fn.__module__,
                name=fn.fn.__name__,
                signature=tuple(signature.items()),
                constexprs=tuple(sorted(constexprs.items())),
                attrs=tuple(sorted((k, tuple(map(tuple, v))) for k, v in attrs.items())),
                num_warps=options.num_warps,
                num_stages=options.num_stages,
                dtype=dtype,
                where=where,
            )
            for fn, signature, constexprs, options, attrs in pending
        ]
        pending.clear()
        return out

    saved, saved_driver = JITFunction._do_compile, driver._active  # None without a GPU: reset_active would raise
    driver.set_active(_StandInDriver(arch))
    JITFunction._do_compile = record
    try:
        yield take
    finally:
        JITFunction._do_compile = saved
        driver._active = saved_driver


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
    from kernels.paged_attention import compile_split_path
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


def kernel_test_launches() -> Iterator[tuple[str, str, Callable[[], None]]]:
    """(dtype, where, launch) for the GPU-size launches of tests/kernels (FULL=True: HEAD_DIM 128)."""
    from kernels import rms_norm, rotary, silu_and_mul, store_kv
    from kernels.paged_attention import LaunchConfig, _launch, compile_split_path, paged_attention

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
    for block_m, tile_n in ((16, 32), (64, 16), (128, 16)):
        yield (
            "fp16",
            "test_launch_configs",
            lambda m=block_m, n=tile_n: _launch(
                *_paged(MIXED, 8, 2, 128, 16, fp16), num_splits=1, config=LaunchConfig(m, n, 4, 2)
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


# --- 2. compiling ----------------------------------------------------------------------------------------


def ptxas_path(arch: int) -> str | None:
    """The ptxas Triton would use for this target (bundled in the wheel, or TRITON_PTXAS_PATH), or None."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        path = get_ptxas(arch).path
    except Exception:  # noqa: BLE001 (no CUDA backend, or no ptxas anywhere: both mean "cannot check")
        return None
    return path if path and os.path.exists(path) else None


def cuobjdump_path() -> str | None:
    ptxas = ptxas_path(90) or ptxas_path(80)
    path = os.path.join(os.path.dirname(ptxas), "cuobjdump") if ptxas else None
    return path if path and os.path.exists(path) else shutil.which("cuobjdump")


@dataclass
class Result:
    variant: Variant
    arch: int
    error: str | None = None
    shared_bytes: int = 0
    local_bytes: int = 0  # per thread: the stack frame (spills, call frames) + local arrays
    spill_bytes: int = 0  # per thread: ptxas's spill stores + spill loads
    registers: int = 0
    int32_offsets: list[str] = field(default_factory=list)


def compile_variant(variant: Variant, arch: int) -> Result:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = getattr(importlib.import_module(variant.module), variant.name)
    src = ASTSource(fn, dict(variant.signature), dict(variant.constexprs),
                    {k: [list(a) for a in v] for k, v in variant.attrs})  # fmt: skip
    result = Result(variant, arch)
    try:
        kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                                options={"num_warps": variant.num_warps, "num_stages": variant.num_stages})  # fmt: skip
    except Exception as err:  # noqa: BLE001 (every compile failure is a finding, reported with its message)
        result.error = f"{type(err).__name__}: {str(err)[-2000:]}"
        return result
    result.shared_bytes = kernel.metadata.shared
    result.registers, result.local_bytes = resource_usage(kernel.asm["cubin"])
    if result.local_bytes:  # a stack frame is not always a spill: ask ptxas
        result.spill_bytes = ptxas_spill_bytes(kernel.asm["ptx"], arch)
    cache_args = [name for name, ty in variant.signature if name.endswith("cache_ptr") and ty.startswith("*")]
    result.int32_offsets = int32_cache_offsets(kernel.asm["ttir"], cache_args)
    return result


def resource_usage(cubin: bytes) -> tuple[int, int]:
    """(registers, local bytes per thread) from `cuobjdump -res-usage`: STACK is the stack frame ptxas lays
    spills in, LOCAL other local memory; their sum is what the driver reports as the local size."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuobjdump_path(), "-res-usage", f.name], capture_output=True, text=True, check=True)
    match = re.search(r"REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", out.stdout)
    if match is None:
        raise RuntimeError(f"cuobjdump -res-usage printed no resource line:\n{out.stdout}")
    return int(match[1]), int(match[2]) + int(match[3])


def ptxas_spill_bytes(ptx: str, arch: int) -> int:
    """Spill stores + spill loads (bytes per thread) that ptxas -v reports, with the flags Triton's make_cubin
    passes (the same register allocation)."""
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "k.ptx")
        with open(src, "w") as f:
            f.write(ptx)
        cmd = [ptxas_path(arch), "-lineinfo", "-v", "--regAllocOptLevel=2", f"--gpu-name={sm_arch_from_capability(arch)}",
               src, "-o", os.path.join(tmp, "k.cubin")]  # fmt: skip
        log = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    found = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if not found:
        raise RuntimeError(f"ptxas -v printed no spill line:\n{log}")
    return sum(int(a) + int(b) for a, b in found)


# --- 3. the int32-offset check on KV-cache pointers --------------------------------------------------------

_DEF = re.compile(r"^\s*(%[\w.#-]+)(?::\d+)? = ([\w.]+)\b(.*)$")
_NAME = re.compile(r"%[\w.#-]+")
_ITER_ARG = re.compile(r"(%[\w.#-]+) = (%[\w.#-]+)")
BOUNDED_OPS = {"arith.constant", "tt.make_range"}  # values fixed at compile time


def int32_cache_offsets(ttir: str, cache_args: list[str]) -> list[str]:
    """Offsets into a KV cache that may be computed in 32 bits: one line of TTIR each.

    A cache holds more than 2^31 elements on a large GPU (block_id * block stride passes it), so any offset
    arithmetic that can reach that size must be 64-bit. Sound check on the TTIR (values named after the
    Python variables, before any optimisation): for every `tt.addptr` whose pointer derives from a cache
    argument (`*cache_ptr`, through splat/broadcast/addptr/loop-carried values),
    (a) the offset is i64, or an i32 computed from constants and tl.arange alone (bounded by constexprs);
    (b) no i32 `arith.muli` in the offset's backward slice takes an operand that derives from a `stride*`
        argument: strides are what scale an index into an element offset, so a 32-bit product with one can
        overflow before a later widening.
    Conservative: a bounded 32-bit product (head index * head stride) is flagged too; the kernels widen
    those, at the cost of a few 64-bit multiplies per tile.
    """
    args = set(re.findall(r"(%[\w.#-]+): [^ ]", ttir.split("tt.func", 1)[1].split("\n", 1)[0]))
    lines = [re.sub(r"\s+loc\(.*$", "", line) for line in ttir.splitlines()]
    defs: dict[str, tuple[str, list[str], str]] = {}  # name -> (op, operands, text)
    aliases: dict[str, str] = {}  # loop-carried block argument -> its initial value
    for line in lines:
        for block_arg, init in _ITER_ARG.findall(line.split("iter_args", 1)[1]) if "iter_args" in line else []:
            aliases[block_arg] = init
        m = _DEF.match(line)
        if m:
            rest = m[3].split(" : ", 1)[0] if m[2] != "scf.for" else ""
            defs[m[1]] = (m[2], _NAME.findall(rest), line)
    derived = set(cache_args and [f"%{a}" for a in cache_args])
    for _ in range(3):  # loop-carried pointers may need a second pass
        for name, (op, operands, text) in defs.items():
            if "!tt.ptr" in text.split(" : ")[-1] and any(o in derived for o in operands):
                derived.add(name)
        derived |= {b for b, init in aliases.items() if init in derived}

    def slice_of(name: str) -> set[str]:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n in seen:
                continue
            seen.add(n)
            todo += defs[n][1] if n in defs else ([aliases[n]] if n in aliases else [])
        return seen

    def from_stride(name: str) -> bool:
        return any(n in args and n.lstrip("%").startswith("stride") for n in slice_of(name))

    findings = []
    for name, (op, operands, text) in defs.items():
        if op != "tt.addptr" or operands[0] not in derived:
            continue
        offset = operands[1]
        offset_type = text.split(" : ")[-1].split(",")[-1].strip()
        sliced = slice_of(offset)
        if offset_type.endswith(("i32", "xi32>")):
            leaves_ok = all(n in defs and (defs[n][0] in BOUNDED_OPS or defs[n][1]) for n in sliced)
            if not leaves_ok:
                findings.append(f"32-bit runtime offset: {text.strip()}")
                continue
        for n in sliced:
            d_op, d_operands, d_text = defs.get(n, ("", [], ""))
            if d_op == "arith.muli" and re.search(r"(\bi32|xi32>)$", d_text) and any(map(from_stride, d_operands)):
                findings.append(f"32-bit stride product: {d_text.strip()}")
    return sorted(set(findings))


# --- the check --------------------------------------------------------------------------------------------


def findings_of(result: Result) -> list[str]:
    v, out = result.variant, []
    if result.error:
        return [f"compile error: {result.error}"]
    if result.spill_bytes and v.dtype in LOW_PRECISION:
        out.append(f"register spills: {result.spill_bytes} B/thread stored + loaded, {result.registers} registers")
    if result.shared_bytes > MAX_SHARED_BYTES[result.arch]:
        out.append(f"{result.shared_bytes} B shared memory > {MAX_SHARED_BYTES[result.arch]} B per block")
    out += result.int32_offsets
    return out


def _compile_job(job: tuple[Variant, int]) -> Result:
    return compile_variant(*job)


def run_check(work: list[tuple[Variant, int]], jobs: int) -> list[Result]:
    if jobs <= 1:
        return [compile_variant(*w) for w in work]
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_compile_job, work, chunksize=4))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_engine.compile_check", description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, action="append", choices=ARCHS, help="target(s); default: 90 and 80")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="compiling processes")
    parser.add_argument("--verbose", action="store_true", help="print every variant's figures")
    parser.add_argument("--all", action="store_true", help="every dtype x geometry, every variant on every target")
    opts = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        print("error: run without TRITON_INTERPRET=1 (interpreted kernels cannot be compiled)", file=sys.stderr)
        return 2
    archs = tuple(opts.arch or ARCHS)
    missing = [a for a in archs if ptxas_path(a) is None]
    if missing or cuobjdump_path() is None:
        print(f"skip: no ptxas for sm_{missing} or no cuobjdump (set TRITON_PTXAS_PATH)", file=sys.stderr)
        return 3
    start = time.perf_counter()
    work = []
    for arch in archs:
        variants = record_variants(arch, opts.all)
        work += [(v, arch) for v in (variants if opts.all else ci_set(variants, arch))]
    recorded_s = time.perf_counter() - start
    results = run_check(work, opts.jobs)
    failed = 0
    for r in results:
        bad = findings_of(r)
        failed += bool(bad)
        if bad or opts.verbose:
            status = "FAIL" if bad else "ok"
            print(f"{status} sm_{r.arch} {r.variant.label()}  regs={r.registers} local={r.local_bytes}B "
                  f"shared={r.shared_bytes}B  (first launched by {r.variant.where})")  # fmt: skip
            for b in bad:
                print(f"     {b}")
        elif r.local_bytes:
            print(f"note sm_{r.arch} {r.variant.label()}: {r.local_bytes} B/thread stack frame, {r.spill_bytes} B "
                  f"spilled{' (fp32: not failed)' if r.spill_bytes else ' (no spill: not failed)'}")  # fmt: skip
    counts = ", ".join(f"sm_{a}: {sum(arch == a for _, arch in work)}" for a in archs)
    print(f"{len(work)} variant compiles ({counts}; {'--all' if opts.all else 'the CI set'}) in "
          f"{time.perf_counter() - start:.0f} s (recording {recorded_s:.1f} s); {failed} failed")  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
