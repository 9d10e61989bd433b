"""`python -m gpu_engine.bench` end to end in its CPU mode (tiny model, small workloads): every section runs
and reports positive figures. Timings and targets are only printed; a GPU run judges them."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest

# kernels.bench (whose copy-bandwidth measurement the bench reuses) imports triton: Linux x86-64 only.
pytest.importorskip("triton")
pytest.importorskip("torch")
from helpers.engine import transformers

transformers(module_level=True)  # the static baseline is transformers' generate()

from gpu_engine.bench import MEMORY_ROWS, main
from gpu_engine.engine import EngineError
from planner.calibration.device_gpu import catalog_gpu_of_device, load_gpu_catalog

# Its module-scoped fixture is computed once per pytest-xdist worker: every test of the module on one worker.
pytestmark = pytest.mark.xdist_group("test_engine_bench")

NUM_REQUESTS = 6


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory) -> tuple[dict, str]:
    """One run shared by the section tests (capsys is per test, so stdout is redirected here)."""
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    with redirect_stdout(io.StringIO()) as printed:
        assert main(["--device", "cpu", "--tiny", "--num-requests", str(NUM_REQUESTS), "--json", str(path)]) == 0
    return json.loads(path.read_text()), printed.getvalue()


def test_decode_section_compares_the_step_with_the_weights_read_floor(bench_run):
    figures, printed = bench_run
    decode = figures["decode"]
    for key in ("step_ms", "host_ms", "weights_read_bytes", "copy_bandwidth_gbs", "floor_ms", "ratio"):
        assert decode[key] > 0, key
    assert decode["host_ms"] <= decode["step_ms"] * 1.01  # the host part of a step (CPU: all of it)
    assert decode["cuda_graphs"] is False  # CPU: eager
    assert decode["ratio"] == pytest.approx(decode["step_ms"] / decode["floor_ms"])
    assert decode["verdict"].startswith("n/a")  # CPU: no PASS/MISS
    assert "1. decode" in printed and "floor (weights / copy bw)" in printed and "host time per step" in printed


def test_throughput_section_runs_the_engine_and_static_generate_on_the_same_requests(bench_run):
    figures, printed = bench_run
    t = figures["throughput"]
    assert t["num_requests"] == NUM_REQUESTS and t["output_tokens"] > 0
    assert t["engine"]["output_tokens_per_s"] > 0 and t["static"]["output_tokens_per_s"] > 0
    assert t["engine"]["num_steps"] > 0 and t["static"]["batch_size"] == 4
    assert t["ratio"] == pytest.approx(t["engine"]["output_tokens_per_s"] / t["static"]["output_tokens_per_s"])
    assert "2. throughput" in printed and "transformers generate (static, batch 4)" in printed


def test_memory_section_puts_profiling_beside_the_memory_model(bench_run):
    figures, printed = bench_run
    memory = figures["memory"]
    assert memory["gpu"] == "cpu"
    for key in ("weights_bytes", "activation_bytes", "kv_cache_bytes", "num_gpu_blocks"):
        assert memory["measured"][key] > 0 and memory["predicted"][key] > 0, key
    assert 0 < memory["pool_blocks_allocated"] <= memory["measured"]["num_gpu_blocks"]
    assert "3. memory" in printed and all(label in printed for label in MEMORY_ROWS.values())


@pytest.mark.parametrize(
    ("device_name", "total_gib", "key"),
    [
        ("NVIDIA H200", 140, "h200"),
        ("NVIDIA H100 80GB HBM3", 79, "h100-sxm"),
        ("NVIDIA H100 PCIe", 79, "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", 79, "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", 39.5, "a100-40gb"),
        ("NVIDIA A10", 22, "a10"),
        ("NVIDIA A10G", 22, "a10g"),
        ("NVIDIA GeForce RTX 4090", 23.5, "rtx-4090"),
        ("NVIDIA B200", 179, "b200"),
        ("NVIDIA H200 NVL", 140, "h200-nvl"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 95, "rtx-pro-6000"),
        ("NVIDIA RTX 6000 Ada Generation", 47.5, "rtx-6000-ada"),
        ("NVIDIA L40", 44.4, "l40"),
        # no catalog part, though one word matches one (the matcher once called any RTX a 4090)
        ("NVIDIA GeForce RTX 3090", 23.5, None),
        ("NVIDIA RTX A6000", 47.5, None),
        ("NVIDIA H100 NVL", 93, None),
        ("NVIDIA A100-PCIE-40GB", 39.4, "a100-40gb"),
    ],
)
def test_catalog_gpu_is_found_from_the_device_name(device_name, total_gib, key):
    assert catalog_gpu_of_device(device_name, int(total_gib * 2**30)) == key
    assert key is None or key in load_gpu_catalog()


def test_a_model_without_a_transformers_class_fails_before_running():
    with pytest.raises(EngineError, match="model_type 'qwen'"):
        main(["--device", "cpu", "--model", "qwen-7b", "--num-requests", "1"])
