"""The commands as a user runs them: outputs written, JSON on stdout, one clear error and exit 2."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest
from helpers import ROOT

from planner.cli import main

SCENARIOS = sorted((ROOT / "scenarios").glob("*.yaml"))


def planner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "planner.cli", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.name)
def test_every_shipped_scenario_validates(path):
    assert main(["validate", str(path)]) == 0


def test_memory_json_pins_the_worked_example(capsys):
    assert main(["memory", "scenarios/a10_qwen7b.yaml", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["kv_bytes_per_token"] == 524_288
    assert mem["weights_bytes"] == pytest.approx(15.44e9, rel=0.01)
    for key in (
        "block_bytes",
        "activation_bytes",
        "non_torch_bytes",
        "kv_cache_bytes",
        "num_gpu_blocks",
        "max_kv_tokens",
    ):
        assert mem[key] > 0


def test_memory_prints_vllm_start_up_lines(capsys):
    assert main(["memory", "scenarios/a10_qwen7b.yaml"]) == 0
    out = capsys.readouterr().out
    assert "GPU KV cache size: " in out and " tokens" in out
    assert "Maximum concurrency for 4,096 tokens per request: " in out


def test_memory_shows_the_pool_an_override_sets(capsys):
    """cpu_tiny's 64-block override: the pool is 64 x 8 KiB, not the 21 GiB left for it (once printed as the pool)."""
    assert main(["memory", "scenarios/cpu_tiny.yaml"]) == 0
    out = capsys.readouterr().out
    assert "KV cache pool                512.00 KiB  (engine.num_gpu_blocks_override; " in out
    # without the override: the pool vLLM's formula leaves (tests/test_first_principles.py recomputes it)
    assert main(["memory", "scenarios/a10_qwen7b.yaml", "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert main(["memory", "scenarios/a10_qwen7b.yaml"]) == 0
    pool_gib = mem["num_gpu_blocks"] * mem["block_bytes"] / 2**30
    assert f"KV cache pool                {pool_gib:.2f} GiB\n" in capsys.readouterr().out


def test_requests_at_once_under_contiguous_kv_reserve_max_model_len_each(capsys):
    # It printed 61.6 (the paged figure at the mean 135 tokens): the simulator ran 2 at once.
    assert main(["memory", "scenarios/a10_qwen7b.yaml", "--json", "--set", "engine.kv_cache=contiguous"]) == 0
    mem = json.loads(capsys.readouterr().out)
    # each request holds max_model_len's blocks, whatever its length: the pool's tokens over 4,096 at once
    at_once = mem["num_gpu_blocks"] * mem["block_size"] / mem["max_model_len"]
    assert mem["max_model_len"] == 4096 and mem["max_concurrency_at_max_len"] == pytest.approx(at_once)
    assert mem["requests_at_mean_length"] == pytest.approx(at_once)  # not the paged figure at the mean length
    assert main(["memory", "scenarios/a10_qwen7b.yaml", "--json"]) == 0
    paged = json.loads(capsys.readouterr().out)  # paged: blocks as the tokens need them, so many more at once
    blocks_at_mean = math.ceil(paged["mean_request_tokens"] / paged["block_size"])  # a request holds whole blocks
    assert paged["requests_at_mean_length"] == pytest.approx(paged["num_gpu_blocks"] / blocks_at_mean)
    assert paged["requests_at_mean_length"] > 10 * at_once
    assert main(["memory", "scenarios/a10_qwen7b.yaml", "--set", "engine.kv_cache=contiguous"]) == 0
    assert f"requests at once             {at_once:.1f} each reserving max_model_len, 4,096 tokens (contiguous KV)" in (
        capsys.readouterr().out
    )


def test_the_cpu_device_takes_no_cuda_graph_memory_from_the_pool(capsys):
    # It subtracted vLLM's CUDA-graph estimate (286 MiB here) though the cost model rightly captures none there.
    sets = ["--set", "hardware.gpu=cpu", "--set", "engine.num_gpu_blocks_override=null"]
    blocks = {}
    for eager in ("false", "true"):
        assert main(
            ["memory", "scenarios/a10_qwen7b.yaml", "--json", *sets, "--set", f"engine.enforce_eager={eager}"]
        ) in (0, 2)
        mem = json.loads(capsys.readouterr().out)
        assert mem["cuda_graph_bytes"] == 0
        blocks[eager] = mem["num_gpu_blocks"]
    assert blocks["false"] == blocks["true"]


def test_the_ttft_floor_says_a_prefix_cache_hit_skips_the_shared_prefix(capsys):
    assert main(["simulate", "scenarios/l40s_qwen25_7b_shared_prompt.yaml", "--set", "workload.num_requests=20"]) == 0
    assert "tokens computed whole (a prefix-cache hit skips its shared prefix)" in capsys.readouterr().out
    assert main(["simulate", "scenarios/a10_qwen7b.yaml", "--set", "workload.num_requests=20"]) == 0
    assert "computed whole" not in capsys.readouterr().out  # no shared prefix


def test_slo_verdicts_say_they_leave_out_the_requests_rejected_as_too_long(capsys):
    args = ["simulate", "scenarios/a10_qwen7b.yaml", "--set", "workload.num_requests=40"]
    rejecting = ["--set", "engine.max_model_len=200", "--set", "workload.too_long=reject"]
    prompts = ["--set", "workload.prompt_tokens={dist: uniform, low: 10, high: 150}"]
    assert main([*args, *rejecting, *prompts]) == 0
    out = capsys.readouterr().out
    served, rejected = (int(n) for n in re.search(r"(\d+) requests in .*, (\d+) rejected as too long", out).groups())
    assert served + rejected == 40 and rejected > 0
    assert f"(over the {served} requests served: the {rejected} rejected as too long, {rejected / 40:.1%} of 40" in out
    assert main([*args, *prompts]) == 0
    assert "rejected" not in capsys.readouterr().out


def test_memory_and_validate_headers_name_the_replicas(capsys):
    assert main(["memory", "scenarios/a10_qwen7b.yaml", "--set", "hardware.replicas=3"]) == 0
    assert "on 3 replicas of 1x a10" in capsys.readouterr().out.splitlines()[0]
    assert main(["validate", "scenarios/h100x4_llama31_70b_tp4.yaml", "--set", "hardware.replicas=2"]) == 0
    assert "llama-3.1-70b on 2 replicas of 4x h100-sxm," in capsys.readouterr().out


def test_tensor_parallel_halves_weights_and_kv_per_gpu(capsys):
    main(["memory", "scenarios/h100x4_llama31_70b_tp4.yaml", "--json", "--set", "hardware.tensor_parallel_size=2"])
    tp2 = json.loads(capsys.readouterr().out)
    main(["memory", "scenarios/h100x4_llama31_70b_tp4.yaml", "--json"])
    tp4 = json.loads(capsys.readouterr().out)
    assert tp4["weights_bytes"] == pytest.approx(tp2["weights_bytes"] / 2, rel=1e-6)
    assert tp4["kv_bytes_per_token"] * 2 == tp2["kv_bytes_per_token"]


def test_llama31_8b_kv_per_token_with_gqa(capsys):
    main(["memory", "scenarios/h100_llama31_8b_azure_conv.yaml", "--json"])
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 131_072


def test_a_model_that_does_not_fit_is_refused_with_numbers(capsys):
    from planner.catalog import catalog_model

    code = main(["memory", "scenarios/a10_qwen7b.yaml", "--set", "model=llama-2-70b"])
    out = capsys.readouterr().out
    assert code == 2
    weights_gib = catalog_model("llama-2-70b").num_params * 2 / 2**30  # bfloat16: 2 bytes a parameter
    assert "cannot run" in out and f"{weights_gib:.2f} GiB" in out and "hardware.tensor_parallel_size 8" in out
    # The suggestion is a real fix: at the suggested size the same deployment fits.
    args = ["memory", "scenarios/a10_qwen7b.yaml", "--set", "model=llama-2-70b"]
    assert main([*args, "--set", "hardware.tensor_parallel_size=8"]) == 0
    assert main([*args, "--set", "hardware.tensor_parallel_size=4"]) == 2


def test_simulate_writes_every_output_and_is_deterministic(tmp_path):
    runs = []
    for name in ("a", "b"):
        result = planner("simulate", "scenarios/a10_qwen7b.yaml", "--out", str(tmp_path / name), "--json")
        assert result.returncode == 0, result.stderr
        summary = json.loads(result.stdout)
        assert summary["mode"] == "simulated" and summary["completed"] == 200
        for key in (
            "request_throughput",
            "output_throughput",
            "total_token_throughput",
            "mean_ttft_ms",
            "median_ttft_ms",
            "p90_ttft_ms",
            "p99_ttft_ms",
            "p99_tpot_ms",
            "p99_itl_ms",
            "p99_e2el_ms",
            "num_requests",
            "duration_s",
            "memory",
            "kv_cache_utilization",
            "num_preemptions",
            "goodput",
            "scenario",
            "cost_model",
        ):
            assert key in summary, key
        files = {p.name for p in (tmp_path / name).iterdir()}
        assert {
            "summary.json",
            "requests.csv",
            "steps.csv",
            "latency_cdf.png",
            "throughput.png",
            "kv_cache.png",
        } <= files
        runs.append((tmp_path / name / "summary.json").read_bytes())
    assert runs[0] == runs[1]
    lines = (tmp_path / "a" / "requests.csv").read_text().splitlines()
    assert lines[0].startswith("request_id,arrival_s,first_token_s,finished_s") and len(lines) == 201


def test_static_batching_halves_throughput_on_the_mixed_scenario(capsys):
    main(["simulate", "scenarios/a100_llama2_7b_mixed.yaml", "--json", "--set", "workload.num_requests=300"])
    continuous = json.loads(capsys.readouterr().out)
    main(
        [
            "simulate",
            "scenarios/a100_llama2_7b_mixed.yaml",
            "--json",
            "--set",
            "workload.num_requests=300",
            "--set",
            "engine.scheduler=static",
        ]
    )
    static = json.loads(capsys.readouterr().out)
    assert static["output_throughput"] < continuous["output_throughput"] / 2


@pytest.mark.parametrize(
    "override, words",
    [
        ("engine.max_num_seq=8", ["engine.max_num_seq", "max_num_seqs"]),
        ("workload.arrival.rate=-2", ["workload.arrival.rate", "-2"]),
        ("engine.gpu_memory_utilization=1.5", ["engine.gpu_memory_utilization", "1.5", "(0, 1]"]),
    ],
)
def test_bad_input_exits_2_with_the_key_and_no_traceback(override, words):
    for command in ("validate", "simulate", "memory"):
        result = planner(command, "scenarios/a10_qwen7b.yaml", "--set", override)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr
        assert "a10_qwen7b.yaml" in result.stderr
        for word in words:
            assert word in result.stderr


def test_compare_prints_side_by_side(tmp_path, capsys):
    for name, rate in (("a", "2"), ("b", "4")):
        main(
            [
                "simulate",
                "scenarios/cpu_tiny.yaml",
                "--out",
                str(tmp_path / name),
                "--json",
                "--set",
                f"workload.arrival.rate={rate}",
            ]
        )
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "TTFT p99 (ms)" in out and "num_gpu_blocks" in out and "%" in out
    # what the two were run with, when it differs: a run of another scenario must not read as a model error
    assert out.splitlines()[-1] == "The two scenarios differ: workload.arrival.rate 2.0 vs 4.0"
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "a"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario_differences"] == []
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "missing")]) == 2


def test_catalog_lists_and_shows(capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert "h100-sxm" in out and "qwen-7b" in out
    assert main(["catalog", "gpu", "a10"]) == 0
    assert json.loads(capsys.readouterr().out)["memory_bandwidth_gbps"] == 600.0
    assert main(["catalog", "gpu", "a11"]) == 2


def test_latency_columns_widen_for_figures_of_a_million_ms(capsys):
    from planner.outputs.report import summary_lines

    assert main(["simulate", "scenarios/cpu_tiny.yaml", "--json", "--set", "workload.num_requests=8"]) == 0
    s = json.loads(capsys.readouterr().out)
    s["p90_ttft_ms"], s["p99_ttft_ms"] = 1_074_149.2, 1_306_079.3  # a queue of hours: once printed run together
    row = next(line for line in summary_lines(s) if line.strip().startswith("TTFT"))
    assert row.split()[-2:] == ["1,074,149.2", "1,306,079.3"]
