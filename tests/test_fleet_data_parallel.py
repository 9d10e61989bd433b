"""A fleet pool that is a data-parallel (+ expert-parallel) group (sim/fleet_dp.py): one group behind the fleet's
router runs exactly as the one-pool data-parallel simulation; a prefill/decode fleet of groups pulls each prompt's KV
rank to rank; the shipped scenario runs; bad input is refused with one message."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.catalog import catalog_gpu
from planner.cli import main
from planner.errors import ScenarioError
from planner.fidelity.data_parallel import h800
from planner.fidelity.dp_fleet import runs, scenario_mapping
from planner.outputs.fleet_summary import fleet_lines
from planner.scenario.load import load_scenario, validate_mapping
from sim.driver import simulate
from sim.fleet import simulate_fleet
from sim.fleet_dp import DataParallelReplica
from sim.kv_transfer import kv_transfer_bytes

ROOT = Path(__file__).resolve().parent.parent
MOE_DP2 = ROOT / "scenarios" / "cpu_tiny_moe_dp2.yaml"  # a tiny MoE as a DP2 / EP2 group on the CPU
SHIPPED = ROOT / "scenarios" / "fleet_deepseek_v3_pd_dp_ep.yaml"
HOST_LINK = {"link": "host_memory", "bandwidth_gbit_per_s": 80, "latency_ms": 0.05}


def dense(data: dict) -> dict:
    """The scenario with the tiny dense Llama: its ranks are independent engines, no lockstep."""
    return {**data, "model": "tiny-llama", "hardware": {**data["hardware"], "expert_parallel": False}}


def as_fleet(tmp_path: Path, pools: dict, edit=lambda data: data, **fleet) -> Path:
    """The tiny MoE scenario (`edit`ed) with its hardware moved into fleet pools (each pool's over the group's)."""
    data = edit(yaml.safe_load(MOE_DP2.read_text()))
    group = data.pop("hardware")
    data["fleet"] = {
        "pools": {name: {**pool, "hardware": {**group, **pool.get("hardware", {})}} for name, pool in pools.items()},
        **fleet,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("edit", [lambda data: data, dense], ids=["lockstep", "dense"])
def test_one_group_behind_the_router_runs_as_the_one_pool_group(tmp_path, edit):
    """The router has one group to pick; its balancer, steps (and lockstep) are the one-pool simulation's."""
    fleet = simulate_fleet(load_scenario(as_fleet(tmp_path, {"group": {}}, edit)))
    one_pool = tmp_path / "one_pool.yaml"
    one_pool.write_text(yaml.safe_dump(edit(yaml.safe_load(MOE_DP2.read_text())), sort_keys=False))
    alone = simulate(load_scenario(one_pool))
    ours, theirs = fleet.recorder.requests.view(), alone.recorder.requests.view()
    for column in ("request_id", "first_token_s", "finished_s"):
        np.testing.assert_array_equal(ours[column], theirs[column])
    (group,) = fleet.pools[0].replicas
    assert isinstance(group, DataParallelReplica)
    assert group.requests_per_rank == alone.data_parallel["requests_per_rank"]
    assert group.stats()["lockstep_steps"] == alone.data_parallel["lockstep_steps"]
    assert (group.group is None) == (edit is dense)


@pytest.mark.parametrize("edit", [lambda data: data, dense], ids=["lockstep", "dense"])
def test_prefill_and_decode_groups_pull_each_prompt_rank_to_rank(tmp_path, edit):
    pools = {"prefill": {"role": "prefill", "hardware": {"replicas": 2}}, "decode": {"role": "decode"}}
    s = load_scenario(as_fleet(tmp_path, pools, edit, kv_transfer=HOST_LINK))
    result = simulate_fleet(s)
    n = s.workload.num_requests
    assert len(result.recorder.requests.view()["finished_s"]) == n
    prefill, decode = result.pools
    assert len(prefill.replicas) == 2  # two whole groups of two ranks
    sent = [sum(g.requests_per_rank) for g in prefill.replicas]
    assert sum(sent) == n and min(sent) > 0  # least_outstanding spread the requests over both groups
    assert sum(decode.replicas[0].requests_per_rank) == n
    # every prompt's KV pulled once, its bytes the decode engine's for the prompt but the decode side's local hits
    assert len(result.transfers.start_s) == n
    for tokens, num_bytes in zip(result.transfers.num_tokens, result.transfers.num_bytes, strict=True):
        assert num_bytes == kv_transfer_bytes(decode.facts, tokens)
    # each rank's steps under its fleet-wide engine index (2 groups x 2 ranks, then the decode ranks 4 and 5): those
    # of the ranks its balancer sent requests to (a prefill finishes at once, so rank 0 of a group, the first of
    # equal scores, takes most)
    for pool in result.pools:
        sent_to = {
            pool.first_replica + 2 * g + rank
            for g, group in enumerate(pool.replicas)
            for rank, count in enumerate(group.requests_per_rank)
            if count
        }
        assert {int(r) for r in pool.recorder.step_rows()["replica"]} == sent_to
    assert decode.first_replica == 4 and len(decode.replicas[0].ranks) == 2
    again = simulate_fleet(s)  # same scenario and seed: the same run
    np.testing.assert_array_equal(
        again.recorder.requests.view()["finished_s"], result.recorder.requests.view()["finished_s"]
    )


def test_the_shipped_scenario_prints_each_group_and_its_serve_lines(tmp_path, capsys):
    out_dir = tmp_path / "out"
    assert main(["simulate", str(SHIPPED), "--set", "workload.num_requests=40", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    # llm-d's chart starts a data-parallel group its own way (planner/sizing/llmd_values.py): no values written
    assert (out_dir / "summary.json").exists() and not (out_dir / "llm-d-values.yaml").exists()
    assert "1x prefill (data parallel 16 x 1x h200) + 1x decode (data parallel 16 x 1x h200) = 32 devices" in out
    assert "prefill (prefill, 1x DP16 x 1x h200 (EP))" in out and "decode (decode, 1x DP16 x 1x h200 (EP))" in out
    assert out.count("lockstep MoE (deepep_") == 2 and out.count("    group 0: requests per rank") == 2
    assert out.count("--data-parallel-size 16 --data-parallel-size-local 8") == 2
    assert out.count("--headless --data-parallel-start-rank 8") == 2
    assert "40 pulls" in out


def test_fleet_lines_give_every_groups_ranks():
    summary = {
        "fleet": {
            "topology": "t", "num_gpus": 8, "router": "round_robin", "bottleneck_pool": "a",
            "pools": {"a": {
                "role": "mixed", "replicas": 2, "tensor_parallel_size": 2, "gpu": "h100-sxm", "completed": 9,
                "p99_ttft_ms": 1.0, "p99_tpot_ms": 1.0, "kv_cache_utilization": {"mean": 0.1, "peak": 0.2},
                "limited_by": "x", "data_parallel_size": 2, "expert_parallel": False, "all2all_backend": "naive",
                "groups": [{"requests_per_rank": [2, 3], "lockstep_steps": 0}, {"requests_per_rank": [4, 0],
                                                                                 "lockstep_steps": 0}],
            }},
        }
    }  # fmt: skip
    lines = fleet_lines(summary)
    assert "  a (mixed, 2x DP2 x 2x h100-sxm): 9 requests" in lines[1]
    assert lines[2:4] == [
        "    group 0: requests per rank 2 to 3 (vLLM's DP balancer)",
        "    group 1: requests per rank 0 to 4 (vLLM's DP balancer)",
    ]


@pytest.mark.parametrize(
    ("pools", "fleet", "message"),
    [
        (  # the ranks x tensor parallel must fill the pool's nodes (vLLM runs as many ranks on each)
            {"a": {"hardware": {"data_parallel_size": 3, "gpus_per_node": 2}}},
            {},
            (
                r"fleet\.pools\.a\.hardware\.data_parallel_size = 3: makes 3 GPUs at tensor_parallel_size 1, which"
                r" must fill the 1 node\(s\) of 2 GPUs"
            ),
        ),
        (
            {"a": {"hardware": {}}, "b": {"hardware": {}}},
            {"router": {"policy": "prefix"}},
            r"fleet\.router\.policy = \"prefix\": pool a is a data-parallel group",
        ),
    ],
)
def test_bad_data_parallel_pools_are_refused(tmp_path, pools, fleet, message):
    path = as_fleet(tmp_path, copy.deepcopy(pools), **fleet)
    if "prefix" in str(fleet):
        data = yaml.safe_load(path.read_text())
        data["engine"]["enable_prefix_caching"] = True
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ScenarioError, match=message):
        load_scenario(path)


def test_copies_of_a_one_pool_group_point_to_a_fleet():
    with pytest.raises(ScenarioError, match=r"hardware\.replicas = 2: copies of a data-parallel group are a fleet"):
        load_scenario(MOE_DP2, ["hardware.replicas=2"])


def test_the_live_pair_refuses_a_data_parallel_pool(tmp_path, capsys):
    pools = {"prefill": {"role": "prefill"}, "decode": {"role": "decode"}}
    path = as_fleet(tmp_path, pools, kv_transfer=HOST_LINK)
    assert main(["run", str(path), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "data-parallel pools, with `planner simulate`" in err and err.count("\n") == 1


def test_the_deployment_fleets_are_the_listed_settings():
    """planner/fidelity/dp_fleet.py simulates the listed DP / EP sizes and nodes, overlap and EPLB as listed."""
    for run in runs(h800(), catalog_gpu("h100-sxm")):
        s = validate_mapping(scenario_mapping(run, 8), run.source, ROOT)
        prefill, decode = s.fleet.pools
        for pool, (ranks, nodes) in ((prefill, run.prefill), (decode, run.decode)):
            hw, engine = pool.hardware, pool.engine
            assert (hw.data_parallel_size, hw.num_nodes, hw.expert_parallel) == (ranks, nodes, True)
            assert hw.gpu == run.gpu and engine.enable_dbo and engine.eplb_num_redundant_experts == 32
        assert (prefill.engine.all2all_backend, decode.engine.all2all_backend) == (
            "deepep_high_throughput",
            "deepep_low_latency",
        )
        assert s.workload.prompt_tokens.value == run.prompt_tokens
