"""`python -m gpu_engine.host_bench` runs without a GPU (stand-in driver, stubbed launches) and prints every
kernel's host time, checked and unchecked, and a layer's; figures are not judged (a shared CPU is noisy)."""

import os
import re
import subprocess
import sys

import pytest
from helpers import ROOT

pytest.importorskip("triton")


def test_host_bench_prints_each_kernel_and_a_layer():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-m", "gpu_engine.host_bench", "--repeats", "2"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    for kernel in ("paged_attention", "store_kv", "rms_norm + residual", "rotary", "silu_and_mul"):
        row = re.search(rf"^{re.escape(kernel)} +([\d.]+) +([\d.]+)", out.stdout, re.MULTILINE)
        assert row and float(row[1]) > 0 and float(row[2]) > 0, kernel
    assert re.search(r"before [\d.]+ \(checked kernels\), after [\d.]+", out.stdout)


def test_host_bench_refuses_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-m", "gpu_engine.host_bench"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert out.returncode == 2 and "TRITON_INTERPRET" in out.stderr
