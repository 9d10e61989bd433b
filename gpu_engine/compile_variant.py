"""One kernel variant compiled for one target, as the compile check (gpu_engine.compile_check) does it:
Triton's own compiler and the ptxas in the triton wheel, then the variant's registers, local and shared
memory, spills and 32-bit cache offsets.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field

from gpu_engine.compile_offsets import int32_cache_offsets
from gpu_engine.compile_recording import Variant


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
