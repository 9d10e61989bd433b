"""A KV tier in host memory (engine.kv_offload, vLLM's native offloading connector): what it keeps (LRU of every
block computed), what a request finds there past its GPU hits, what the loads cost on the host link, the pinned
memory `planner memory` counts, and what it refuses to combine with (exit 2)."""

from __future__ import annotations

import json
import math

import pytest
from helpers import ROOT

from planner.cli import main
from planner.outputs.prefix_reuse import lru_hit_rates
from planner.scenario.load import load_scenario
from sim.config import KvOffloadConfig
from sim.driver import simulate
from sim.host_tier import HostTier
from sim.metrics import summarize

CONV = ROOT / "scenarios" / "h100_llama31_8b_mooncake_conv.yaml"
CPU = ROOT / "scenarios" / "cpu_tiny.yaml"
# the tiny trace's prompts one at a time, 10 s apart, on a GPU pool of 11 usable blocks: a prompt's blocks are
# evicted from the GPU by the next ones, and come back from the host tier
TINY_TRACE = [
    "engine.max_model_len=160",
    "engine.num_gpu_blocks_override=12",
    "engine.enable_prefix_caching=true",
    "workload.num_requests=12",
    "workload.arrival={process: constant, rate: 0.1}",
    "workload.prompt_tokens={dist: trace}",
    "workload.output_tokens={dist: fixed, value: 4}",
    (
        "workload.trace={path: traces/cpu_tiny_prefix_ids.jsonl, prompt_column: input_length, output_column:"
        " output_length, block_ids_column: hash_ids, block_tokens: 32}"
    ),
]


def _summary(path, overrides):
    s = load_scenario(path, overrides)
    result = simulate(s, record_steps=False)
    return s, result, summarize(result.recorder, s.slo)


def test_the_tier_is_an_lru_of_every_block_stored():
    tier = HostTier(2, 100, KvOffloadConfig(size_gib=1.0, host_link_gb_s=10.0))
    tier.store(["a", "b"], [1, 2])
    assert tier.lookup(["a", "b", "c"]) == 2  # both held: a, then b touched
    tier.store(["b", "c"], [2, 3])  # b is held already (not stored again); c evicts the least recently used, a
    assert (tier.num_stored, tier.num_evicted) == (3, 1)
    assert tier.lookup(["a"]) == 0 and tier.lookup(["b", "c"]) == 2
    assert tier.lookup(["c", "x", "b"]) == 1  # the leading run only


def test_a_host_hit_is_loaded_in_bytes_over_the_link_and_waited_for():
    off = _summary(CPU, TINY_TRACE)[2]
    on = _summary(CPU, [*TINY_TRACE, "engine.kv_offload={size_gib: 0.01, host_link_gb_s: 0.5}"])[2]
    prefix, tier = on["prefix_cache"], on["kv_offload"]
    # the GPU alone keeps too little: the tier finds what it lost, and no GPU hit is lost to it
    assert prefix["host_hit_tokens"] > 0 and prefix["hit_tokens"] >= off["prefix_cache"]["hit_tokens"]
    kv_bytes_per_token = tier["loaded_bytes"] // (prefix["host_hit_tokens"])
    assert tier["loaded_bytes"] == prefix["host_hit_tokens"] * kv_bytes_per_token
    # one request at a time: each load has the link to itself, bytes / bandwidth
    assert tier["load_s"] == pytest.approx(tier["loaded_bytes"] / 0.5e9, rel=1e-9)
    split = prefix["mean_ttft_split_ms"]
    assert split["load"] == pytest.approx(tier["load_s"] / on["completed"] * 1e3, rel=1e-9)
    assert split["queueing"] + split["load"] + split["compute"] == pytest.approx(on["mean_ttft_ms"], rel=1e-9)
    # the requests wait for their loads: over a link a thousand times faster, TTFT is shorter by 999/1000 of them
    fast = _summary(CPU, [*TINY_TRACE, "engine.kv_offload={size_gib: 0.01, host_link_gb_s: 500}"])[2]
    assert fast["prefix_cache"]["host_hit_tokens"] == prefix["host_hit_tokens"]
    assert on["mean_ttft_ms"] - fast["mean_ttft_ms"] == pytest.approx(0.999 * split["load"], rel=1e-6)


def test_the_simulated_tier_finds_what_an_lru_of_its_size_finds_at_light_load():
    # The tier holds every block computed, the GPU's too: GPU and host hits together are an LRU over the trace of
    # the tier's size (planner.outputs.prefix_reuse), within a point, when requests rarely overlap.
    s, _, summary = _summary(CONV, ["workload.num_requests=600"])
    prefix, blocks = summary["prefix_cache"], summary["kv_offload"]["num_blocks"]
    (lru,) = lru_hit_rates(s, [blocks])
    assert prefix["hit_rate"] + prefix["host_hit_rate"] == pytest.approx(lru, abs=0.01)
    assert prefix["host_hit_rate"] > 0.01
    assert lru < lru_hit_rates(s, [math.inf])[0]  # a bounded tier: some reuse is still lost


def test_planner_memory_counts_the_pinned_host_memory(capsys):
    assert main(["memory", str(CONV), "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)
    assert mem["kv_offload"]["pinned_bytes_per_gpu"] == 200 * 2**30
    assert mem["kv_offload"]["num_blocks"] == 200 * 2**30 // mem["block_bytes"]
    assert main(["memory", str(CONV)]) == 0
    assert "Host KV tier (pinned host memory): 200.00 GiB per GPU" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            ["engine.kv_offload={size_gib: 300, host_link_gb_s: 50, host_memory_gib: 256}"],
            (
                "engine.kv_offload.size_gib = 300.0: pins 300 GiB of host memory for the engine's 1 GPU(s), more"
                " than host_memory_gib 256 allows"
            ),
        ),
        (["engine.kv_offload={size_gib: 10}"], "engine.kv_offload.host_link_gb_s"),
        (["engine.enable_prefix_caching=false"], "cannot be combined with engine.enable_prefix_caching"),
        (
            ["engine.speculative={method: ngram, num_speculative_tokens: 3}"],
            "cannot be combined with engine.speculative",
        ),
        (["hardware.data_parallel_size=2"], "cannot be combined with hardware.data_parallel_size"),
    ],
)
def test_what_a_host_tier_cannot_take_is_refused(capsys, overrides, words):
    args = ["simulate", str(CONV), "--set", "workload.num_requests=4"]
    for item in overrides:
        args += ["--set", item]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_the_cpu_scenario_loads_from_its_tier():
    # what the host-tier parity case (tests/test_executor_parity.py) runs on both executors
    summary = _summary(ROOT / "scenarios" / "cpu_tiny_offload.yaml", [])[2]
    assert summary["prefix_cache"]["host_hit_tokens"] > 0 and summary["kv_offload"]["num_loads"] > 0


def test_the_live_engine_copies_a_block_out_and_back_exactly():
    torch = pytest.importorskip("torch")
    from helpers.engine import tier_copies

    from sim.kv_manager import KVCacheManager
    from sim.request import Request

    kv = KVCacheManager(8, 16, enable_caching=True)
    kv.host = HostTier(4, 1, KvOffloadConfig(size_gib=1.0, host_link_gb_s=10.0))
    copies, caches, added = tier_copies(kv)
    first = Request(0, 0.0, 40, 4, prompt_token_ids=list(range(40)))
    assert kv.allocate_slots(first, 40)  # its two full blocks are registered, and stored in the tier
    copies._copy_out()  # after the step that computed them
    computed = [(k[first.block_ids[:2]].clone(), v[first.block_ids[:2]].clone()) for k, v in caches]
    for k, v in caches:  # the GPU's copies are gone
        k.zero_()
        v.zero_()
    again = Request(1, 0.0, 40, 4, prompt_token_ids=list(range(40)))
    again.block_ids = [5, 6]  # the blocks the scheduler gave its load
    copies.loads.append((again, 2))
    copies._load(lambda: 0.0)
    for (k, v), (k_then, v_then) in zip(caches, computed, strict=True):
        assert torch.equal(k[[5, 6]], k_then) and torch.equal(v[[5, 6]], v_then)
    assert added == [again] and copies.loads == []


@pytest.mark.parametrize("key", ["engine.kv_offload", "fleet.pools.prefill.engine.kv_offload"])
def test_a_fleet_with_a_host_tier_is_refused(capsys, key):
    args = [
        "simulate",
        str(ROOT / "scenarios" / "cpu_tiny_pd.yaml"),
        "--set",
        f"{key}={{size_gib: 1, host_link_gb_s: 10}}",
    ]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "engine.kv_offload (pool " in err and "not yet in a fleet" in err and "Traceback" not in err
