"""The benchmark runs end to end (tiny interpreted shapes on CPU) and prints its table."""

import re
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


def test_bench_sweep_prints_the_best_decode_config():
    repo = Path(__file__).resolve().parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "kernels.bench", "--sweep"], cwd=repo, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(re.findall(r"^ +(16|32|64) +[123] +[24] +1 ", result.stdout, re.MULTILINE)) == 18
    assert re.search(
        r"^best: LaunchConfig\(block_m=16, tile_n=\d+, num_warps=\d, num_stages=\d\)", result.stdout, re.MULTILINE
    )
