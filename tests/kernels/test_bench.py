"""The benchmark runs end to end (tiny interpreted shapes on CPU) and prints its table."""

import subprocess
import sys
from pathlib import Path

from kernels_testutil import require_triton

require_triton()


def test_bench_runs():
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "kernels.bench"], cwd=repo, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    for case in ("decode attention", "prefill attention", "store_kv", "rms_norm + residual"):
        assert case in result.stdout
