"""Fleets: pools behind a router, and prefill/decode disaggregation (sim/fleet.py), against figures derived from
first principles (the model's KV bytes, the link's bandwidth, the steps the cost model priced), and the bad input
`planner validate` refuses."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from planner.cli import main
from planner.scenario.load import load_scenario
from sim.driver import simulate
from sim.fleet import fleet_step_rows, simulate_fleet
from sim.metrics import summarize

ROOT = Path(__file__).resolve().parent.parent
TINY = {"model": "tiny-llama", "dtype": "float32", "engine": {"max_num_seqs": 16, "max_num_batched_tokens": 512,
        "max_model_len": 512, "num_gpu_blocks_override": 64, "enforce_eager": True}}  # fmt: skip
PD = {
    "pools": {
        "prefill": {"role": "prefill", "hardware": {"gpu": "cpu"}},
        "decode": {"role": "decode", "hardware": {"gpu": "cpu"}},
    },
    "kv_transfer": {"link": "tcp", "bandwidth_gbit_per_s": 0.8, "latency_ms": 2.0},
}


def scenario_of(tmp_path: Path, data: dict, name: str = "fleet.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_scenario(str(path), [])


def tiny(fleet: dict | None = None, workload: dict | None = None, **top) -> dict:
    data = copy.deepcopy(TINY) | top
    data["workload"] = workload or {"num_requests": 1, "arrival": {"process": "poisson", "rate": 1.0}}
    if fleet is not None:
        data["fleet"] = copy.deepcopy(fleet)
    return data


def fixed(num_requests: int, prompt: int, output: int, rate: float = 1.0) -> dict:
    return {
        "num_requests": num_requests,
        "arrival": {"process": "poisson", "rate": rate},
        "prompt_tokens": {"dist": "fixed", "value": prompt},
        "output_tokens": {"dist": "fixed", "value": output},
    }


def kv_bytes_first_principles(num_tokens: int) -> int:
    """tiny-llama: K and V of 2 KV heads of 64 / 4 = 16 dims in each of 2 layers, float32."""
    return 2 * 2 * 2 * 16 * 4 * num_tokens


def test_one_request_ttft_is_prefill_plus_pull_plus_first_decode_step(tmp_path):
    s = scenario_of(tmp_path, tiny(PD, fixed(1, 100, 5)))
    result = simulate_fleet(s)
    steps = fleet_step_rows(result)
    prefill_rows, decode_rows = steps["pool"] == 0, steps["pool"] == 1
    (prefill_s,) = steps["duration_s"][prefill_rows]  # the prompt whole, one token sampled
    assert steps["num_tokens"][prefill_rows][0] == 100
    first_decode = np.flatnonzero(decode_rows)[0]
    assert steps["num_tokens"][first_decode] == 1  # the prompt's last token recomputed, the first token sampled
    assert steps["sum_context_tokens"][first_decode] == 100
    pull_s = 2.0e-3 + kv_bytes_first_principles(100) / (0.8e9 / 8)
    req = result.recorder.requests.view()
    ttft_s = req["first_token_s"][0] - req["arrival_s"][0]
    assert ttft_s == pytest.approx(prefill_s + pull_s + steps["duration_s"][first_decode], rel=1e-9)
    assert decode_rows.sum() == 5  # then four decode steps: one per token
    t = result.transfers.summary(s.fleet.kv_transfer, 2.0)
    assert t["num_transfers"] == 1 and t["bytes_moved"] == kv_bytes_first_principles(100)
    assert t["median_transfer_ms"] == pytest.approx(pull_s * 1e3, rel=1e-9)


def test_concurrent_pulls_share_the_link(tmp_path):
    # Two users sending equal prompts at once: prefilled in one step, pulled at once, each at half the link, so
    # both end at latency + 2x one pull alone.
    workload = {**fixed(2, 100, 3), "arrival": {"process": "closed", "concurrency": 2}}
    s = scenario_of(tmp_path, tiny(PD, workload))
    result = simulate_fleet(s)
    durations_s = np.array(result.transfers.end_s) - np.array(result.transfers.start_s)
    solo_s = kv_bytes_first_principles(100) / (0.8e9 / 8)
    assert durations_s == pytest.approx([2.0e-3 + 2 * solo_s] * 2, rel=1e-9)


def test_layerwise_pull_overlaps_the_prefill_step(tmp_path):
    link = {"link": "tcp", "bandwidth_gbit_per_s": 0.8, "latency_ms": 2.0, "layerwise": True,
            "connector": "LMCacheConnectorV1"}  # fmt: skip
    s = scenario_of(tmp_path, tiny({**PD, "kv_transfer": link}, fixed(1, 100, 3)))
    result = simulate_fleet(s)
    steps = fleet_step_rows(result)
    prefill_s = steps["duration_s"][steps["pool"] == 0][0]
    solo_s = kv_bytes_first_principles(100) / (0.8e9 / 8)
    expected_s = 2.0e-3 + max(solo_s - prefill_s, solo_s / 2)  # at least one layer's share of 2 is left
    (duration_s,) = np.array(result.transfers.end_s) - np.array(result.transfers.start_s)
    assert duration_s == pytest.approx(expected_s, rel=1e-9)


def test_prefill_blocks_held_until_pulled(tmp_path):
    # A prefill pool of 16 blocks (one the null block) holds two 100-token prompts (7 blocks of 16 tokens each):
    # four users at once, the last two are prefilled only once both first pulls have freed their blocks.
    pd = copy.deepcopy(PD)
    pd["pools"]["prefill"]["engine"] = {"num_gpu_blocks_override": 16}
    workload = {**fixed(4, 100, 2), "arrival": {"process": "closed", "concurrency": 4}}
    result = simulate_fleet(scenario_of(tmp_path, tiny(pd, workload)))
    steps = fleet_step_rows(result)
    prefill_starts = steps["start_s"][steps["pool"] == 0]
    assert len(prefill_starts) == 2 and steps["num_tokens"][steps["pool"] == 0].tolist() == [200, 200]
    first_pulls_end = sorted(result.transfers.end_s)[1]
    assert prefill_starts[1] == first_pulls_end  # not a step before the blocks came back
    assert summarize(result.recorder, load_scenario_slo())["completed"] == 4


def test_one_mixed_pool_is_the_one_pool_scenario(tmp_path):
    # A fleet of one mixed pool is today's replicas: the same requests, the same figures.
    workload = {"num_requests": 60, "seed": 3, "arrival": {"process": "poisson", "rate": 40.0},
                "prompt_tokens": {"dist": "uniform", "low": 8, "high": 200},
                "output_tokens": {"dist": "uniform", "low": 2, "high": 60}}  # fmt: skip
    one = tiny(workload=workload, hardware={"gpu": "cpu", "replicas": 2, "router": "least_outstanding"})
    fleet = {"pools": {"all": {"hardware": {"gpu": "cpu", "replicas": 2}}}, "router": {"policy": "least_outstanding"}}
    a = summarize(simulate(scenario_of(tmp_path, one, "one.yaml")).recorder, load_scenario_slo())
    b = summarize(simulate_fleet(scenario_of(tmp_path, tiny(fleet, workload))).recorder, load_scenario_slo())
    for key in ("completed", "duration_s", "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_itl_ms"):
        assert a[key] == b[key], key


def load_scenario_slo():
    from sim.config import SloConfig

    return SloConfig()


def test_length_router_splits_by_prompt_length(tmp_path):
    workload = {"num_requests": 80, "arrival": {"process": "poisson", "rate": 20.0},
                "prompt_tokens": {"dist": "uniform", "low": 8, "high": 300},
                "output_tokens": {"dist": "fixed", "value": 4}}  # fmt: skip
    fleet = {
        "pools": {"short": {"hardware": {"gpu": "cpu"}}, "long": {"hardware": {"gpu": "cpu"}}},
        "router": {"policy": "length", "threshold_tokens": 100, "short_pool": "short", "long_pool": "long"},
    }
    result = simulate_fleet(scenario_of(tmp_path, tiny(fleet, workload)))
    short, long = (p.recorder.requests.view()["prompt_tokens"] for p in result.pools)
    assert len(short) + len(long) == 80 and len(short) and len(long)
    assert short.max() <= 100 < long.min()


def test_prefix_router_keeps_a_prefix_group_on_one_replica(tmp_path):
    workload = {"num_requests": 40, "arrival": {"process": "poisson", "rate": 5.0},
                "prompt_tokens": {"dist": "fixed", "value": 200}, "output_tokens": {"dist": "fixed", "value": 4},
                "shared_prefix": {"tokens": 128, "group_size": 40}}  # fmt: skip
    fleet = {"pools": {"all": {"hardware": {"gpu": "cpu", "replicas": 3}}}, "router": {"policy": "prefix"}}
    engine = {**TINY["engine"], "enable_prefix_caching": True}
    result = simulate_fleet(scenario_of(tmp_path, tiny(fleet, workload, engine=engine)))
    replicas = result.pools[0].recorder.step_rows()["replica"]
    # after the first request fills the cache of replica 0, every later one hits it there
    assert set(replicas.tolist()) == {0}


BAD = [
    ("decode pool without a prefill pool", lambda d: d["fleet"]["pools"].pop("prefill"),
     "fleet.pools.decode.role = \"decode\": a decode pool needs a prefill pool"),
    ("link without bandwidth", lambda d: d["fleet"]["kv_transfer"].pop("bandwidth_gbit_per_s"),
     "fleet.kv_transfer.bandwidth_gbit_per_s: missing; link tcp needs its bandwidth"),
    ("pools whose models differ", lambda d: d["fleet"]["pools"]["decode"].__setitem__("model", "llama-3.1-8b"),
     "fleet.pools.decode.model = \"llama-3.1-8b\": every pool of a fleet serves the scenario's model (tiny-llama)"),
    ("threshold router with one pool", lambda d: d.__setitem__("fleet", {
        "pools": {"a": {"hardware": {"gpu": "cpu"}}},
        "router": {"policy": "length", "threshold_tokens": 100, "short_pool": "a", "long_pool": "a"}}),
     "fleet.router.policy = \"length\": routes by prompt length between two mixed pools; this fleet has 1 pool(s)"),
    ("prefix router with prefix caching off", lambda d: (d["fleet"].__setitem__("router", {"policy": "prefix"}),
                                                          d["engine"].__setitem__("enable_prefix_caching", False)),
     "enable_prefix_caching = false: the prefix router sends a request to the replica holding its longest"),
    ("static scheduler in a decode pool",
     lambda d: d["fleet"]["pools"]["decode"].__setitem__("engine", {"scheduler": "static"}),
     "fleet.pools.decode.engine.scheduler = \"static\": a decode pool runs vLLM's continuous scheduler"),
    ("pools of other max_model_len",
     lambda d: d["fleet"]["pools"]["decode"].__setitem__("engine", {"max_model_len": 256}),
     "fleet.pools.decode.engine.max_model_len = 256: must equal pool prefill's (512)"),
]  # fmt: skip


@pytest.mark.parametrize("what, change, message", BAD, ids=[b[0] for b in BAD])
def test_bad_fleets_one_message_exit_2(tmp_path, capsys, what, change, message):
    data = tiny(PD)
    change(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"planner: error: {path}: ") and "\n" not in err and "Traceback" not in err
    assert message in err


def test_shipped_fleets_validate(capsys):
    for name in ("cpu_tiny_pd.yaml", "h100_llama31_70b_pd.yaml"):
        assert main(["validate", str(ROOT / "scenarios" / name)]) == 0
    assert "prefill (1x cpu) + 1x decode (1x cpu)" in capsys.readouterr().out


def test_serve_lines_name_the_connector_and_each_side_role(tmp_path):
    from planner.sizing.fleet_serve import fleet_serve_lines

    data = tiny(PD, model="llama-3.1-8b", dtype="bfloat16")
    for pool in ("prefill", "decode"):
        data["fleet"]["pools"][pool]["hardware"] = {"gpu": "l40s"}
    data["engine"] = {"max_model_len": 4096}
    nixl = fleet_serve_lines(scenario_of(tmp_path, data))
    assert (
        sum("""--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'""" in line for line in nixl)
        == 2
    )
    data["fleet"]["kv_transfer"]["connector"] = "MooncakeConnector"
    prefill, decode = (line for line in fleet_serve_lines(scenario_of(tmp_path, data)) if line.startswith("vllm"))
    assert prefill.endswith("""'{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"}'""")
    assert decode.endswith("""'{"kv_connector":"MooncakeConnector","kv_role":"kv_consumer"}'""")


def test_memory_of_a_fleet_is_each_pools(capsys):
    assert main(["memory", str(ROOT / "scenarios" / "cpu_tiny_pd.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.count("  num_gpu_blocks ") == 2 and "pool prefill (prefill):" in out and "pool decode (decode):" in out


def test_size_refuses_a_fleet(capsys):
    assert main(["size", str(ROOT / "scenarios" / "cpu_tiny_pd.yaml")]) == 2
    err = capsys.readouterr().err
    assert "fleet: planner size searches one pool of identical replicas, and prefill/decode units" in err
    assert "search.disaggregated" in err and "Traceback" not in err
