"""The kernel benchmark's plumbing on tiny shapes (`--tiny`: seconds on a GPU too, interpreted on CPU).

Figures are not judged here: the benchmark prints them against their targets on a GPU
(`python -m planner_kernels.bench --sweep`, run by `python -m gpu_engine.gpu_check`)."""

import json
import subprocess
import sys

import pytest
from helpers import ROOT

pytest.importorskip("torch")
from helpers.kernels import require_triton

require_triton()
from planner_kernels.paged_attention_config import MAX_SPLITS


def run_bench(tmp_path, *flags) -> tuple[str, dict]:
    path = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "planner_kernels.bench", "--tiny", "--json", str(path), *flags],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout, json.loads(path.read_text())


def test_bench_times_every_case_against_its_reference(tmp_path):
    printed, figures = run_bench(tmp_path)
    cases = {(row["case"], row["impl"]) for row in figures["cases"]}
    for case in ("decode attention", "prefill attention", "store_kv", "rms_norm + residual"):
        assert (case, "triton") in cases and (case, "torch ref") in cases
        assert case in printed
    assert all(row["ms"] > 0 and row["copy_share"] > 0 for row in figures["cases"])
    assert not figures["full_size"] and all(row["target_min_copy_share"] is None for row in figures["cases"])
    assert figures["sweep"] is None


@pytest.mark.slow  # the default launch config is timed above, in every run
def test_bench_sweep_times_every_config_and_reports_the_fastest(tmp_path):
    printed, figures = run_bench(tmp_path, "--sweep")
    rows = figures["sweep"]["rows"]
    assert len(rows) == 18  # tile_n {16, 32, 64} x num_stages {1, 2, 3} x num_warps {2, 4}
    assert {(r["tile_n"], r["num_stages"], r["num_warps"]) for r in rows} == {
        (t, s, w) for t in (16, 32, 64) for s in (1, 2, 3) for w in (2, 4)
    }
    # each row runs with the split count paged_attention itself would pick, a legal one
    assert all(1 <= r["splits"] <= MAX_SPLITS for r in rows)
    fastest = min(rows, key=lambda r: r["ms"])
    best = figures["sweep"]["best"]
    assert (best["tile_n"], best["num_stages"], best["num_warps"]) == (
        fastest["tile_n"], fastest["num_stages"], fastest["num_warps"],
    )  # fmt: skip
    assert f"best: LaunchConfig(block_m={best['block_m']}, tile_n={best['tile_n']}" in printed
