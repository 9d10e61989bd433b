"""The ahead-of-time compile check (gpu_engine.compile_check): sm_90 and sm_80, no GPU, Triton's compiler and
the ptxas in the triton wheel. The check itself runs in a subprocess (kernels must be imported without
TRITON_INTERPRET, which tests/conftest.py sets on machines without CUDA); its findings are unit-tested here."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

pytest.importorskip("triton")
from gpu_engine.compile_check import MAX_SHARED_BYTES, findings_of
from gpu_engine.compile_offsets import int32_cache_offsets
from gpu_engine.compile_recording import Variant
from gpu_engine.compile_variant import Result, ptxas_path

needs_ptxas = pytest.mark.skipif(
    ptxas_path(90) is None or ptxas_path(80) is None, reason="no ptxas (triton's bundled one, or TRITON_PTXAS_PATH)"
)


def ttir_of(tmp_path: Path, source: str, name: str, signature: dict, constexprs: dict) -> str:
    """TTIR of a kernel written in `source`, compiled for sm_90 in a subprocess (no interpreter there)."""
    code = (
        "import sys\nimport triton\nimport triton.language as tl\n"
        "from triton.backends.compiler import GPUTarget\nfrom triton.compiler import ASTSource\n"
        f"{source}\nsrc = ASTSource({name}, {signature!r}, {constexprs!r})\n"
        'sys.stdout.write(triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ttir"])\n'
    )
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


STORE = """
@triton.jit
def {name}(cache_ptr, x_ptr, slot_ptr, stride_cb, stride_ct, BLOCK_SIZE: tl.constexpr):
    slot = tl.load(slot_ptr){cast}
    d = tl.arange(0, 16)
    tl.store(cache_ptr + (slot // BLOCK_SIZE) * stride_cb + (slot % BLOCK_SIZE) * stride_ct + d, tl.load(x_ptr + d))
"""
SIGNATURE = {"cache_ptr": "*fp16", "x_ptr": "*fp16", "slot_ptr": "*i32", "stride_cb": "i32", "stride_ct": "i32",
             "BLOCK_SIZE": "constexpr"}  # fmt: skip


@needs_ptxas
def test_int32_offsets_on_a_cache_pointer_are_found_and_int64_ones_pass(tmp_path):
    bad = ttir_of(tmp_path, STORE.format(name="bad", cast=""), "bad", SIGNATURE, {"BLOCK_SIZE": 16})
    good = ttir_of(tmp_path, STORE.format(name="good", cast=".to(tl.int64)"), "good", SIGNATURE, {"BLOCK_SIZE": 16})
    findings = int32_cache_offsets(bad, ["cache_ptr"])
    assert findings and any("stride_cb" in f or "32-bit" in f for f in findings)
    assert int32_cache_offsets(good, ["cache_ptr"]) == []
    assert int32_cache_offsets(bad, []) == []  # only cache pointers are held to it


def variant(dtype: str) -> Variant:
    return Variant("planner_kernels.store_kv", "_store_kv_kernel", (), (), (), 4, 3, dtype, "a test")


def test_spills_fail_in_bf16_and_fp16_only_and_shared_memory_against_each_target():
    assert findings_of(Result(variant("bf16"), 90, local_bytes=8, spill_bytes=16, registers=255))
    assert findings_of(Result(variant("fp16"), 80, local_bytes=8, spill_bytes=16, registers=255))
    assert findings_of(Result(variant("fp32"), 90, local_bytes=8, spill_bytes=16, registers=255)) == []
    assert findings_of(Result(variant("bf16"), 90, local_bytes=8, spill_bytes=0, registers=96)) == []  # call frame
    assert findings_of(Result(variant("bf16"), 90, shared_bytes=MAX_SHARED_BYTES[90])) == []
    assert findings_of(Result(variant("bf16"), 90, shared_bytes=MAX_SHARED_BYTES[90] + 1))
    assert findings_of(Result(variant("bf16"), 80, shared_bytes=MAX_SHARED_BYTES[90]))  # 227 KiB > sm_80's 163
    assert findings_of(Result(variant("fp32"), 90, error="CompilationError: boom")) == [
        "compile error: CompilationError: boom"
    ]


def compile_check(*flags: str) -> str:
    """`python -m gpu_engine.compile_check FLAGS` (no interpreter): its report, which must find nothing."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "gpu_engine.compile_check", *flags], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
    if out.returncode == 3:
        pytest.skip(out.stderr.strip())
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    assert "0 failed" in out.stdout
    return out.stdout


@needs_ptxas
def test_every_kernel_variant_compiles_for_sm90_without_findings():
    """The default configuration: sm_90 (the H100 and H200 the engine is tuned for), every variant of the CI set
    (gpu_engine.compile_launches.ci_set): 135 compiles."""
    printed = compile_check("--arch", "90")
    assert "sm_90: " in printed and "sm_80: " not in printed


@pytest.mark.slow
@needs_ptxas
def test_the_full_compile_matrix_compiles_for_sm90_and_sm80_without_findings():
    """The full matrix (`--all`): every dtype x geometry, every variant on both targets."""
    printed = compile_check("--all")
    assert "sm_90: " in printed and "sm_80: " in printed
