"""Dual-batch overlap (`engine.enable_dbo`, vLLM's --enable-dbo) of a data-parallel expert-parallel group: when a
step splits (sim/dual_batch.py), what the overlapped step costs against its parts, that a step below the thresholds
is exactly as without it, the shipped DeepSeek-V3 group with it, the serve line and the refusals."""

from __future__ import annotations

import dataclasses
import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from planner.calibration.resolve import resolve_cost_model
from planner.cli import main
from planner.errors import ScenarioError
from planner.fidelity.dual_batch import main as table_main
from planner.fidelity.dual_batch import uniform_step
from planner.outputs.data_parallel_summary import data_parallel_lines
from planner.scenario.load import load_scenario
from planner.sizing.serve import vllm_serve_command
from sim.cost_model import CostModel
from sim.driver import simulate
from sim.dual_batch import overlapped_s, splits
from sim.engine_facts import EngineFacts
from sim.metrics import summarize

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
DEEPSEEK_DP16 = SCENARIOS / "h200x16_deepseek_v3_dp16_ep.yaml"
QWEN3_DP2 = SCENARIOS / "h100x2_qwen3_30b_a3b_dp2_ep.yaml"
CPU_PAIR = SCENARIOS / "cpu_tiny_moe_dp2.yaml"
DBO = ("engine.enable_dbo=true",)


def test_the_overlap_lies_between_the_slower_part_and_the_sum_of_both():
    for compute_s, comm_s, layers in itertools.product((1e-4, 3e-3, 0.05), (1e-4, 3e-3, 0.05), (1, 3, 58)):
        step_s = overlapped_s(compute_s, comm_s, layers)
        both_compute, both_comm = 2 * compute_s, 2 * comm_s
        assert max(both_compute, both_comm) < step_s <= both_compute + both_comm
        # one segment of the smaller part stays exposed: the pipeline's fill or drain
        assert step_s == pytest.approx(max(both_compute, both_comm) + min(compute_s, comm_s) / (2 * layers))


def _group_step(path: Path, tokens_per_rank: int, decode: bool):
    """(whole-step device seconds, the DualBatchStep or None) of every rank running the same batch."""
    s = load_scenario(path, DBO)
    cost = CostModel(EngineFacts.of(s), resolve_cost_model(s)[0])  # as planner simulate prices it
    return uniform_step(cost, s.hardware.data_parallel_size, tokens_per_rank, decode)


def test_a_split_step_lies_between_its_parts_and_pays_for_the_split():
    for tokens, decode in ((64, True), (512, True), (2048, False), (8192, False)):
        whole_s, split = _group_step(DEEPSEEK_DP16, tokens, decode)
        assert split is not None
        assert max(split.compute_s, split.all2all_s) <= split.device_s <= split.compute_s + split.all2all_s
        # two half batches cost more than one whole one: the weights read twice, the calls' latencies twice
        assert split.compute_s + split.all2all_s > whole_s


def test_the_overlap_pays_where_the_all_to_all_is_large_and_costs_on_small_decode_batches():
    # DeepSeek-V3 over two 8x H200 nodes: a prefill step's all-to-all crosses the network and is hidden ...
    for tokens in (2048, 8192):
        whole_s, split = _group_step(DEEPSEEK_DP16, tokens, decode=False)
        assert split.device_s < 0.75 * whole_s
    # ... a small decode batch reads its bf16 weights twice for little all-to-all to hide; from a few hundred
    # decodes per rank the split pays (docs/data-parallel-expert-parallel.md)
    for tokens, gains in ((32, False), (128, False), (256, True), (512, True)):
        whole_s, split = _group_step(DEEPSEEK_DP16, tokens, decode=True)
        assert (split.device_s < whole_s) == gains, tokens
    # in one GB200 NVLink domain the all-to-all is small: the split pays on prompt chunks only
    for tokens, decode in ((32, True), (512, True), (2048, False), (8192, False)):
        whole_s, split = _group_step(SCENARIOS / "gb200_deepseek_v3_dp16_ep.yaml", tokens, decode)
        assert (split.device_s < whole_s) == (not decode), tokens


def test_splits_follows_vllms_thresholds_and_all_ranks_agreeing():
    assert splits([32, 40], [True, True], 32, 512)
    assert not splits([31, 40], [True, True], 32, 512)  # one rank below the decode threshold: nobody splits
    assert not splits([511, 600], [False, False], 32, 512)  # a rank with prompt tokens under 512
    assert splits([512, 600], [False, True], 32, 512)
    assert not splits([40, 100], [True, True], 32, 512)  # half the largest (50) >= the smallest: one half empty
    assert not splits([1, 600], [True, False], 1, 1)  # a dummy batch's one token


def test_below_the_thresholds_the_run_is_exactly_as_without_dbo():
    s = load_scenario(DEEPSEEK_DP16, ("workload.num_requests=120",))
    off = simulate(s)
    unreachable = ("engine.dbo_decode_token_threshold=100000", "engine.dbo_prefill_token_threshold=100000")
    on = simulate(load_scenario(DEEPSEEK_DP16, ("workload.num_requests=120", *DBO, *unreachable)))
    assert on.data_parallel["dbo_steps"] == 0 and on.data_parallel["dbo_saved_s"] == 0.0
    for key in ("duration_s", "start_s", "num_tokens"):
        assert np.array_equal(off.recorder.step_rows()[key], on.recorder.step_rows()[key])
    assert {k: v for k, v in on.data_parallel.items() if not k.startswith("dbo_")} == off.data_parallel


def test_the_shipped_deepseek_group_under_load_gets_faster_with_dbo():
    # at 48 requests/s the ranks run long prompt chunks together, where the all-to-all is a large share
    loaded = ("workload.arrival.rate=48", "workload.num_requests=400")
    off = simulate(load_scenario(DEEPSEEK_DP16, loaded))
    on = simulate(load_scenario(DEEPSEEK_DP16, (*loaded, *DBO)))
    dp = on.data_parallel
    assert dp["dbo_steps"] > 0 and dp["dbo_saved_s"] > 0 and dp["dbo_saved_share"] > 0.01
    assert on.recorder.step_rows()["duration_s"].sum() < off.recorder.step_rows()["duration_s"].sum()
    assert dp["all2all_share"] < off.data_parallel["all2all_share"]  # only the exposed all-to-all counts


def test_what_the_docs_say_of_the_shipped_group_holds():
    def run(*overrides):
        s = load_scenario(DEEPSEEK_DP16, overrides)
        result = simulate(s, resolve_cost_model(s)[0])  # as planner simulate prices it
        return summarize(result.recorder, s.slo), result.data_parallel

    off, _ = run()
    on, on_dp = run(*DBO)
    assert on_dp["dbo_saved_s"] < 0 and 1.05 < on["mean_tpot_ms"] / off["mean_tpot_ms"] < 1.15  # "TPOT up 9%"
    scenario = dataclasses.asdict(load_scenario(DEEPSEEK_DP16, DBO))
    line = data_parallel_lines({"data_parallel": on_dp, "scenario": scenario})[-1]
    assert f"which cost {-on_dp['dbo_saved_s']:,.2f} s: {-on_dp['dbo_saved_share']:.1%} of the steps' time" in line
    high, high_dp = run(*DBO, "engine.dbo_decode_token_threshold=256")
    assert high_dp["dbo_steps"] == 0 and high["mean_tpot_ms"] == off["mean_tpot_ms"]
    loaded_off, _ = run("workload.arrival.rate=48")
    loaded_on, _ = run("workload.arrival.rate=48", *DBO)
    assert loaded_on["mean_ttft_ms"] < 0.4 * loaded_off["mean_ttft_ms"]  # "falls by almost two thirds"
    assert 1.0 < loaded_on["mean_tpot_ms"] / loaded_off["mean_tpot_ms"] < 1.06  # "TPOT's mean up 3%"
    assert loaded_on["p99_tpot_ms"] < loaded_off["p99_tpot_ms"]


def test_the_same_scenario_and_seed_give_the_same_results_with_dbo():
    s = load_scenario(DEEPSEEK_DP16, ("workload.num_requests=200", *DBO))
    first, second = simulate(s), simulate(s)
    assert first.data_parallel == second.data_parallel
    assert np.array_equal(first.recorder.step_rows()["duration_s"], second.recorder.step_rows()["duration_s"])


def test_the_summary_says_how_many_steps_split_and_what_that_saved():
    s = load_scenario(DEEPSEEK_DP16, ("workload.arrival.rate=48", "workload.num_requests=200", *DBO))
    dp = {**simulate(s).data_parallel}
    lines = data_parallel_lines({"data_parallel": dp, "scenario": dataclasses.asdict(s)})
    line = next(line for line in lines if "dual-batch overlap" in line)
    expected = f"{dp['dbo_steps']:,} of {dp['lockstep_steps']:,} steps as two micro-batches, which saved"
    assert expected in line and f"{dp['dbo_saved_s']:,.2f} s" in line


def test_the_serve_line_carries_dbo_and_its_thresholds_where_not_vllms_defaults():
    line = vllm_serve_command(load_scenario(DEEPSEEK_DP16, DBO))
    assert "--enable-dbo" in line and "--dbo-" not in line
    line = vllm_serve_command(load_scenario(DEEPSEEK_DP16, (*DBO, "engine.dbo_decode_token_threshold=128")))
    assert "--enable-dbo --dbo-decode-token-threshold 128" in line and "--dbo-prefill" not in line
    assert "--enable-dbo" not in vllm_serve_command(load_scenario(DEEPSEEK_DP16))


@pytest.mark.parametrize(
    ("path", "overrides", "expected"),
    [
        # without data parallel and expert parallel
        (SCENARIOS / "h100_qwen3_30b_a3b.yaml", DBO, r"engine\.enable_dbo = true: is for expert parallel across"),
        # a backend vLLM does not micro-batch
        (QWEN3_DP2, DBO, r"engine\.all2all_backend = \"allgather_reducescatter\": engine\.enable_dbo overlaps DeepEP"),
        # thresholds without dbo, and out of range
        (DEEPSEEK_DP16, ("engine.dbo_decode_token_threshold=64",), r"dbo_decode_token_threshold = 64: .* needs engine"),
        (DEEPSEEK_DP16, (*DBO, "engine.dbo_prefill_token_threshold=1"), r"prefill_token_threshold = 1: must be in \[2,"),
    ],
)  # fmt: skip
def test_each_mistake_has_one_message_naming_key_value_and_what_is_allowed(path, overrides, expected):
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    assert path.name in str(info.value) and re.search(expected, str(info.value)), str(info.value)


def test_the_live_engine_refuses_dbo(tmp_path, capsys):
    args = ["run", str(CPU_PAIR), "--device", "cpu", "--out", str(tmp_path / "run")]
    overrides = ["--set", "engine.all2all_backend=deepep_low_latency", "--set", "engine.enable_dbo=true"]
    assert main([*args, *overrides]) == 2
    err = capsys.readouterr().err
    assert "cpu_tiny_moe_dp2.yaml: engine.enable_dbo = true: the live data-parallel group" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_the_table_command_prints_each_batch_and_refuses_a_backend_without_overlap(capsys):
    assert table_main([str(DEEPSEEK_DP16)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| 32 decodes \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \+\d+% \|", out)
    assert re.search(r"\| 8,192-token prompt chunk \| [\d,.]+ \| [\d,.]+ \| [\d,.]+ \| [\d,.]+ \| -\d+% \|", out)
    assert table_main([str(DEEPSEEK_DP16), "--set", "engine.dbo_decode_token_threshold=64"]) == 0
    assert re.search(r"\| 32 decodes \| [\d.]+ \| - \| - \| not split", capsys.readouterr().out)
    assert table_main([str(QWEN3_DP2)]) == 2
    assert "engine.all2all_backend" in capsys.readouterr().err
