"""A fleet's `--out`: the client's latency CDFs and every pool's throughput and KV cache over time drawn from its own
steps, and for a prefill/decode fleet llm-d's chart values of the fleet that ran."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from helpers import ROOT

PNG = b"\x89PNG\r\n\x1a\n"


def simulate(scenario: str, out, *sets: str) -> subprocess.CompletedProcess:
    args = [arg for item in sets for arg in ("--set", item)]
    return subprocess.run(
        [sys.executable, "-m", "planner.cli", "simulate", scenario, "--out", str(out), *args],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip


def test_a_prefill_decode_fleet_gets_plots_per_pool_and_its_chart_values(tmp_path):
    run = simulate("scenarios/h100_llama31_70b_pd.yaml", tmp_path, "workload.num_requests=80")
    assert run.returncode == 0, run.stderr
    names = [
        "latency_cdf.png",
        "pools.png",
        *(f"{kind}_{pool}.png" for pool in ("prefill", "decode") for kind in ("throughput", "kv_cache")),
    ]
    for name in names:
        assert (tmp_path / name).read_bytes().startswith(PNG), name
    # each pool's figures are its own: the prefill pool's differ from the decode pool's
    assert (tmp_path / "kv_cache_prefill.png").read_bytes() != (tmp_path / "kv_cache_decode.png").read_bytes()
    values = yaml.safe_load((tmp_path / "llm-d-values.yaml").read_text())
    fleet = yaml.safe_load((ROOT / "scenarios/h100_llama31_70b_pd.yaml").read_text())["fleet"]
    for role in ("prefill", "decode"):
        pool = next(p for p in fleet["pools"].values() if p["role"] == role)
        assert values[role]["replicas"] == pool["hardware"]["replicas"]
        assert values[role]["parallelism"]["tensor"] == pool["hardware"]["tensor_parallel_size"]
    assert "llm-d-values.yaml" in run.stdout.splitlines()[-1]
    # what vllm bench serve against the proxy saves: the client's requests, as the summary counts them
    bench = json.loads((tmp_path / "vllm_bench.json").read_text())
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert bench["completed"] == summary["completed"] == 80 and len(bench["ttfts"]) == 80
    assert bench["median_ttft_ms"] == summary["median_ttft_ms"]


def test_a_fleet_by_length_gets_plots_per_pool_and_no_chart_values(tmp_path):
    run = simulate("scenarios/mixed_gpus_llama31_8b_by_length.yaml", tmp_path, "workload.num_requests=80")
    assert run.returncode == 0, run.stderr
    pools = yaml.safe_load((ROOT / "scenarios/mixed_gpus_llama31_8b_by_length.yaml").read_text())["fleet"]["pools"]
    assert (tmp_path / "pools.png").read_bytes().startswith(PNG)
    for pool in pools:
        assert (tmp_path / f"throughput_{pool}.png").read_bytes().startswith(PNG)
        assert (tmp_path / f"kv_cache_{pool}.png").read_bytes().startswith(PNG)
    assert not (tmp_path / "llm-d-values.yaml").exists()  # the chart has no router by prompt length
