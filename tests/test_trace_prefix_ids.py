"""Prefix identity from a trace (Mooncake's hash_ids): requests share exactly the prefixes the trace's block ids
say, in the simulator's block keys and in the live engine's token ids alike; bad ids are refused with one
message naming the file, the line and the key (exit 2)."""

from __future__ import annotations

import json
import math
import re

import pytest
from helpers import ROOT
from helpers.scenarios import make_scenario

from planner.cli import main
from planner.outputs.prefix_reuse import lru_hit_rates
from planner.scenario.load import load_scenario
from sim.driver import simulate
from sim.errors import WorkloadError
from sim.kv_manager import KVCacheManager
from sim.metrics import summarize
from sim.workload import generate_workload, make_request, prompt_token_ids

TRACE = {"path": "traces/cpu_tiny_prefix_ids.jsonl", "prompt_column": "input_length"}
BLOCK_IDS = {**TRACE, "output_column": "output_length", "block_ids_column": "hash_ids", "block_tokens": 32}


def _workload(trace: dict, num_requests: int = 12, **workload):
    s = make_scenario(
        workload={
            "num_requests": num_requests,
            "arrival": {"process": "constant", "rate": 1.0},
            "prompt_tokens": {"dist": "trace"},
            "trace": {**trace, "path": str(ROOT / "scenarios" / trace["path"])},
            **workload,
        }
    )
    return generate_workload(s.workload, s.max_model_len, vocab_size=512)


def test_block_keys_and_token_ids_agree_exactly_where_the_ids_do():
    wl = _workload(BLOCK_IDS)
    assert wl.block_ids[0] == (0, 1, 2) and wl.block_ids[3] == (0, 1, 2, 5)
    r0, r3 = make_request(wl, 0, 0.0), make_request(wl, 3, 0.0)
    # 16-token engine blocks in 32-token trace blocks: r0 (90 tokens, ids 0 1 2) and r3 (ids 0 1 2 5) share blocks
    # 0..4 (tokens 0-79, ids 0, 1 and the first half of 2 that both prompts hold); r0's block 5 (80-95) passes its
    # prompt's end (90), so it is its own
    k0, k3 = r0.block_content_keys(0, 6, 16), r3.block_content_keys(0, 6, 16)
    assert k0[:5] == k3[:5] and k0[5] != k3[5]
    t0, t3 = prompt_token_ids(wl, 0), prompt_token_ids(wl, 3)
    assert t0[:90] == t3[:90] and len(t0) == 90
    # r1 (ids 0 1 3) leaves r0 at the third trace block: keys and tokens part at token 64
    k1, t1 = make_request(wl, 1, 0.0).block_content_keys(0, 4, 16), prompt_token_ids(wl, 1)
    assert k1[:4] == k0[:4] and t1[:64] == t0[:64] and t1[64:70] != t0[64:70]
    assert make_request(wl, 4, 0.0).block_content_keys(0, 1, 16) != k0[:1]  # ids 6 7: nothing in common


def test_the_prefix_cache_hits_where_the_trace_says():
    wl = _workload(BLOCK_IDS)
    kv = KVCacheManager(64, 16, enable_caching=True)
    first = make_request(wl, 0, 0.0)  # ids 0 1 2, 90 tokens
    assert kv.allocate_slots(first, first.num_tokens)
    kv.free(first)
    # r8 (ids 0 1 3 10) hits r0's two first trace blocks: 4 engine blocks; r3 (ids 0 1 2 5) five: all r0 computed
    assert len(kv.get_computed_blocks(make_request(wl, 8, 0.0))) == 4
    assert len(kv.get_computed_blocks(make_request(wl, 3, 0.0))) == 5
    assert kv.get_computed_blocks(make_request(wl, 4, 0.0)) == []


def test_an_engine_block_straddling_two_trace_blocks_is_named_by_the_second():
    wl = _workload(BLOCK_IDS)
    # 24-token engine blocks: block 1 holds tokens 24-47, across trace blocks 0 and 1
    k0, k1 = (make_request(wl, i, 0.0).block_content_keys(0, 3, 24) for i in (0, 1))  # ids 0 1 2 / 0 1 3
    k2 = make_request(wl, 2, 0.0).block_content_keys(0, 2, 24)  # ids 0 4
    assert k0[:2] == k1[:2] and k0[2] != k1[2] and k2[0] == k0[0] and k2[1] != k0[1]


def test_a_wrapped_replay_sends_new_prompts():
    wl = _workload(BLOCK_IDS, num_requests=14)
    assert wl.block_ids[12] == (16, 17, 18) and wl.block_ids[13] == (16, 17, 19)  # rows 0 and 1, shifted by 16
    assert prompt_token_ids(wl, 12)[:64] != prompt_token_ids(wl, 0)[:64]


def test_a_truncated_prompt_keeps_the_ids_it_still_holds():
    wl = _workload(BLOCK_IDS, too_long="truncate", output_tokens={"dist": "fixed", "value": 2000})
    assert wl.prompt_tokens[3] == 48 and wl.block_ids[3] == (0, 1)


def test_millisecond_arrivals_are_read_as_such():
    s = make_scenario(
        workload={
            "num_requests": 3,
            "arrival": {"process": "trace"},
            "prompt_tokens": {"dist": "trace"},
            "trace": {**BLOCK_IDS, "path": str(ROOT / "scenarios/traces/cpu_tiny_prefix_ids.jsonl"),
                      "arrival_column": "timestamp", "arrival_unit": "ms"},
        }
    )  # fmt: skip
    assert generate_workload(s.workload, s.max_model_len).arrival_s.tolist() == [0.0, 0.25, 0.5]


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ({"input_length": 40, "output_length": 3, "hash_ids": [0, 1.5]}, "line 2, key 'hash_ids': id 1 is 1.5:"),
        ({"input_length": 40, "output_length": 3, "hash_ids": [0, "a"]}, "line 2, key 'hash_ids': id 1 is \"a\":"),
        ({"input_length": 40, "output_length": 3, "hash_ids": [0, True]}, "line 2, key 'hash_ids': id 1 is true:"),
        ({"input_length": 40, "output_length": 3, "hash_ids": [0, -1]}, "line 2, key 'hash_ids': id 1 is -1:"),
        ({"input_length": 40, "output_length": 3, "hash_ids": 7}, "line 2, key 'hash_ids': 7 is not a list"),
        (
            {"input_length": 40, "output_length": 3, "hash_ids": [0, 1, 2]},
            "line 2, key 'hash_ids': 3 block ids for input_length 40, which is 2 blocks of 32 tokens",
        ),
    ],
)
def test_bad_block_ids_are_refused_with_file_line_and_key(tmp_path, capsys, row, words):
    trace = tmp_path / "t.jsonl"
    good = {"input_length": 40, "output_length": 3, "hash_ids": [0, 1]}
    trace.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    scenario = _scenario_file(tmp_path, trace)
    assert main(["simulate", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert f"trace file {trace}: {words}" in err and "Traceback" not in err
    with pytest.raises(WorkloadError, match=re.escape(words)):
        generate_workload(load_scenario(scenario).workload, 4096)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("shared_prefix: {tokens: 32, group_size: 2}", "workload.shared_prefix"),
        ("prompt_tokens: {dist: fixed, value: 40}", "workload.prompt_tokens.dist"),
    ],
)
def test_block_ids_with_what_they_contradict_are_refused(tmp_path, capsys, extra, words):
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"input_length": 40, "output_length": 3, "hash_ids": [0, 1]}) + "\n")
    assert main(["simulate", str(_scenario_file(tmp_path, trace, extra))]) == 2
    err = capsys.readouterr().err
    assert words in err and "block_ids_column" in err and "Traceback" not in err


def test_block_ids_in_a_csv_are_refused(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("input_length,output_length,hash_ids\n40,3,0\n")
    assert main(["simulate", str(_scenario_file(tmp_path, trace))]) == 2
    assert "needs a JSON Lines trace" in capsys.readouterr().err


def _scenario_file(tmp_path, trace, extra: str = ""):
    scenario = tmp_path / "s.yaml"
    lines = [
        "model: tiny-llama",
        "dtype: float32",
        "hardware: {gpu: cpu}",
        "engine: {max_model_len: 512, num_gpu_blocks_override: 64}",
        "workload:",
        "  num_requests: 2",
        "  arrival: {process: constant, rate: 1.0}",
        "  prompt_tokens: {dist: trace}" if "prompt_tokens" not in extra else "",
        "  output_tokens: {dist: trace}",
        (
            f"  trace: {{path: {trace.name}, prompt_column: input_length, output_column: output_length,"
            " block_ids_column: hash_ids, block_tokens: 32}"
        ),
        f"  {extra}" if extra else "",
    ]
    scenario.write_text("\n".join(line for line in lines if line) + "\n")
    return scenario


def test_the_simulated_hit_rate_is_an_lru_over_the_trace_at_light_load():
    # At 0.5 req/s the GPU pool holds what a plain LRU over the prompts in arrival order holds (requests rarely
    # overlap): the simulator's hit rate, from its scheduler and block pool, must be that LRU's, within a point.
    s = load_scenario(ROOT / "scenarios" / "h100_llama31_8b_mooncake_conv.yaml", ["workload.num_requests=600"])
    result = simulate(s, record_steps=False)
    summary = summarize(result.recorder, s.slo)
    blocks = result.memory.num_gpu_blocks
    lru_gpu, lru_unbounded = lru_hit_rates(s, [blocks, math.inf])
    assert summary["prefix_cache"]["hit_rate"] == pytest.approx(lru_gpu, abs=0.01)
    assert lru_unbounded > 2 * lru_gpu  # the trace's reuse reaches past the GPU pool: the case a host tier is for
