"""The live engine's data-parallel group (gpu_engine/data_parallel.py): expert parallel as in-process copies gives
one engine's MoE outputs, each rank holding only its experts; `planner run --device cpu` of the shipped pair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the live engine

from gpu_engine.data_parallel import ExpertParallelMoE, expert_ranges, place_experts
from gpu_engine.model import kernel_ops
from gpu_engine.runner import ModelRunner
from planner.cli import main
from planner.scenario.load import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "cpu_tiny_moe_dp2.yaml"


@pytest.mark.parametrize(("num_experts", "num_ranks"), [(8, 2), (10, 4), (60, 8), (3, 3)])
def test_each_rank_gets_vllms_linear_share_of_the_experts(num_experts, num_ranks):
    ranges = expert_ranges(num_experts, num_ranks)
    base, extra = divmod(num_experts, num_ranks)
    assert [len(r) for r in ranges] == [base + (rank < extra) for rank in range(num_ranks)]
    assert [e for r in ranges for e in r] == list(range(num_experts))


def test_dispatch_and_combine_as_copies_give_one_engines_outputs():
    s = load_scenario(SCENARIO)
    one = ModelRunner(s.model, s.dtype, "cpu", None, 16, seed=0)
    ranks = [ModelRunner(s.model, s.dtype, "cpu", None, 16, seed=0) for _ in range(2)]
    moe = one.model.layers[0].mlp
    place_experts(ranks)
    x = torch.randn(40, s.model.hidden_size, generator=torch.Generator().manual_seed(1))
    ops = kernel_ops("cpu")
    expected = moe(x, ops)
    for rank in ranks:
        layer = rank.model.layers[0].mlp
        assert isinstance(layer, ExpertParallelMoE) and layer.w13.shape[0] == s.model.num_experts // 2
        torch.testing.assert_close(layer(x, ops), expected, rtol=1e-5, atol=1e-6)
    assert sum(rank.model.layers[0].mlp.num_dispatched for rank in ranks) > 0


def test_planner_run_of_the_cpu_pair_reports_its_ranks(tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(SCENARIO), "--device", "cpu", "--json", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    dp = summary["data_parallel"]
    assert sum(dp["requests_per_rank"]) == summary["completed"] == 48
    assert dp["lockstep_steps"] > 0 and dp["dispatched_pairs"] > 0
