"""`planner size` searches data-parallel layouts of a mixture of experts (`search.candidates.data_parallel_sizes`,
`expert_parallel`): each layout is one replica's scenario, run by the same data-parallel group simulator as
`planner simulate`, priced by all of its GPUs, and reported with where its step time goes and its serve line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from helpers import ROOT

from planner.errors import ScenarioError
from planner.sizing.candidates import enumerate_candidates
from planner.sizing.probe import run_probe, scenario_at
from planner.sizing.spec import load_sizing
from sim.driver import simulate
from sim.metrics import summarize

SIZING = ROOT / "scenarios/size_h100_qwen3_30b_a3b_dpep.yaml"


def sets(*items: str) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def layouts(*overrides: str):
    kept, pruned = enumerate_candidates(load_sizing(SIZING, list(overrides)))
    return {c.label: c for c in kept}, {p.label: p.reason for p in pruned}


def test_every_layout_is_one_replica_of_its_gpus_and_a_moe_group_needs_expert_parallel():
    kept, pruned = layouts(
        "search.candidates.tensor_parallel_sizes=[1, 2]",
        "search.candidates.data_parallel_sizes=[1, 2, 16]",
        "search.candidates.expert_parallel=[false, true]",
    )
    # tp1 with expert parallel is the same engine as without (vLLM ignores the flag on one GPU): listed once
    assert set(kept) == {
        "h100-sxm tp1",
        "h100-sxm tp2",
        "h100-sxm tp2 ep",
        "h100-sxm tp1 dp2 ep",
        "h100-sxm tp2 dp2 ep",
        "h100-sxm tp1 dp16 ep",
        "h100-sxm tp2 dp16 ep",
    }
    group = kept["h100-sxm tp2 dp16 ep"]
    hw = group.scenario.hardware
    assert (group.num_gpus, hw.data_parallel_size, hw.tensor_parallel_size, hw.expert_parallel) == (32, 16, 2, True)
    # 32 GPUs on the catalog's 8-GPU HGX node: four nodes, the network between them from the catalog
    assert (hw.num_nodes, hw.gpus_per_node, hw.nvlink_domain_gpus, hw.internode_gbit_per_s) == (4, 8, 8, 400)
    assert kept["h100-sxm tp1 dp2 ep"].scenario.hardware.num_nodes == 1
    # data parallel without expert parallel on a mixture of experts: the scenario's own refusal, as the reason
    assert "set expert_parallel true" in pruned["h100-sxm tp1 dp2"]


def test_a_group_that_does_not_fill_whole_nodes_cannot_run():
    _, pruned = layouts(
        "search.candidates.tensor_parallel_sizes=[1]",
        "search.candidates.data_parallel_sizes=[12]",
        "search.candidates.expert_parallel=[true]",
    )
    assert pruned["h100-sxm tp1 dp12 ep"].startswith("data parallel 12 x tensor parallel 1 = 12 GPUs do not fill")


def test_the_all_to_all_sweeps_only_the_groups():
    kept, _ = layouts(
        "search.candidates.tensor_parallel_sizes=[1]",
        "search.candidates.data_parallel_sizes=[1, 2]",
        "search.candidates.expert_parallel=[true]",
        "search.candidates.engine={all2all_backend: [allgather_reducescatter, deepep_low_latency]}",
    )
    assert set(kept) == {
        "h100-sxm tp1",
        "h100-sxm tp1 dp2 ep, a2a allgather_reducescatter",
        "h100-sxm tp1 dp2 ep, a2a deepep_low_latency",
    }
    assert kept["h100-sxm tp1"].scenario.engine.all2all_backend == "allgather_reducescatter"  # the default, unused
    assert kept["h100-sxm tp1 dp2 ep, a2a deepep_low_latency"].scenario.engine.all2all_backend == "deepep_low_latency"


def test_a_probe_of_a_layout_runs_the_data_parallel_group_as_planner_simulate_does():
    kept, _ = layouts(
        "search.candidates.tensor_parallel_sizes=[1]",
        "search.candidates.data_parallel_sizes=[2]",
        "search.candidates.expert_parallel=[true]",
    )
    c = kept["h100-sxm tp1 dp2 ep"]
    probe = run_probe(c.scenario, "rate", 20.0, 80, c.coefficients, stop_early=False, longest=80)  # one run
    s = scenario_at(c.scenario, "rate", 20.0, 80)
    summary = summarize(simulate(s, c.coefficients, record_steps=False).recorder, s.slo)
    assert probe.request_throughput == pytest.approx(summary["request_throughput"], rel=1e-12)
    assert probe.latency_ms["p99_tpot"] == pytest.approx(summary["p99_tpot_ms"], rel=1e-12)
    assert probe.data_parallel["data_parallel_size"] == 2 and probe.data_parallel["lockstep_steps"] > 0
    assert 0 < probe.data_parallel["all2all_share"] < 1


@pytest.mark.parametrize(
    ("item", "key", "says"),
    [
        ("search.candidates.expert_parallel=[yes]", 'search.candidates.expert_parallel[0] = "yes"', "true or false"),
        ("search.candidates.expert_parallel=[]", "search.candidates.expert_parallel = []", "is empty"),
        ("search.candidates.data_parallel_sizes=[2, 0]", "search.candidates.data_parallel_sizes[1] = 0", "[1, 1,024]"),
    ],
)
def test_bad_layouts_are_refused_naming_the_key(item, key, says):
    with pytest.raises(ScenarioError) as e:
        load_sizing(SIZING, [item])
    assert key in str(e.value) and says in str(e.value)


def test_planner_size_prices_every_gpu_of_a_group_and_says_where_its_time_goes():
    small = sets(
        "search.candidates.tensor_parallel_sizes=[1]",
        "search.candidates.data_parallel_sizes=[2]",
        "search.candidates.expert_parallel=[true]",
        "search.probe.num_requests=40",
        "search.probe.max_probes=4",
        "search.demand.rate=10",
    )
    run = subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", str(SIZING), *small, "--json"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    best = next(c for c in data["candidates"] if c["label"] == data["recommended"])
    assert (best["label"], best["data_parallel_size"], best["gpus_per_replica"]) == ("h100-sxm tp1 dp2 ep", 2, 2)
    assert best["costs"]["num_gpus"] == 2 * best["replicas"]
    assert "--data-parallel-size 2" in best["vllm_serve"] and "--enable-expert-parallel" in best["vllm_serve"]
    assert best["at_demand"]["data_parallel"]["lockstep_steps"] > 0
    text = subprocess.run(
        [sys.executable, "-m", "planner.cli", "size", str(SIZING), *small],
        cwd=ROOT, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    assert "Where the data-parallel layouts' step time goes:" in text
    assert "h100-sxm tp1 dp2 ep at " in text and "all-to-all (allgather_reducescatter)" in text
