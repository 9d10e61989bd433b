"""Ahead-of-time compile check of every Triton kernel variant, for sm_90 and sm_80, without a GPU:
`python -m gpu_engine.compile_check` (exit 1 on a finding; tests/kernels/test_compile_check.py runs it).

1. Record the variants. A stand-in Triton driver reports GPUTarget('cuda', 90, 32) (then 80) and
   JITFunction._do_compile is replaced by a recorder that returns None, so a launch binds its arguments as
   on a GPU (dtypes, 16-divisibility of pointers and ints, constexprs, num_warps/num_stages, launch configs
   chosen for that arch) and launches nothing. Under it run, on `meta` tensors (shapes without storage):
   the live engine's forward (gpu_engine.model) for every catalog model geometry plus head_dim 64 and 256
   (models an HF config may add), a mixed prefill step, a decode step, the split-context decode path and
   its merge; and the GPU-size launches of the kernel tests (tests/kernels with FULL=True, listed by hand
   in compile_launches.kernel_test_launches, mirroring them). compile_launches.record_variants says which
   dtypes and block sizes; compile_recording has the stand-in driver and the recorder.
2. Compile each distinct variant with Triton's own compiler (`triton.compile(ASTSource(...),
   target=GPUTarget(...))`, the call JITFunction makes) and the ptxas in the triton wheel (TRITON_PTXAS_PATH
   overrides it), two processes at a time (compile_variant.py).
3. Fail on: a compile error; register spills in a bf16/fp16 variant (when `cuobjdump -res-usage` shows
   local memory, STACK + LOCAL bytes per thread, the figure Triton's `n_spills` reads from the driver,
   ptxas -v is run again on the PTX and its "bytes spill stores/loads" decide: a stack frame without
   spills is printed, not failed; so are fp32 spills, fp32 being the engine's correctness dtype, not its
   speed one); shared memory (metadata.shared) over the target's opt-in limit per block (CUDA programming
   guide, compute capabilities table: 227 KiB on 9.0, 163 KiB on 8.0; of the 228/164 KiB per SM, 1 KiB is
   kept for the system); 32-bit offset arithmetic on a KV-cache pointer (compile_offsets.int32_cache_offsets
   says how).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import sys
import time

from gpu_engine.compile_launches import ci_set, record_variants
from gpu_engine.compile_recording import Variant
from gpu_engine.compile_variant import Result, compile_variant, cuobjdump_path, ptxas_path

MAX_SHARED_BYTES = {90: 227 * 1024, 80: 163 * 1024}  # opt-in shared memory per block
ARCHS = (90, 80)
LOW_PRECISION = ("bf16", "fp16")  # a spill here fails the check


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
