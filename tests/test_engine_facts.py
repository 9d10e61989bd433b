"""An engine's facts are derived once, in sim/engine_facts.py, and handed on: the memory model, the cost model
and the KV manager read them and never call the weight and KV sizing formulas themselves."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from planner.cli import main
from planner.scenario.load import load_scenario
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
FORMULAS = ("sim/weights.py", "sim/kv_sizing.py")


def _calls_into_the_formulas(run) -> tuple[int, list[str]]:
    """(EngineFacts.derive calls, the other functions that called a weight or KV sizing formula) during run()."""
    derives, others = 0, []

    def profile(frame, event, arg):
        nonlocal derives
        if event != "call":
            return
        code = frame.f_code
        if code.co_filename.endswith("sim/engine_facts.py") and code.co_name == "derive":
            derives += 1
        elif code.co_filename.endswith(FORMULAS) and code.co_name != "<module>":
            caller = frame.f_back.f_code
            if not caller.co_filename.endswith(("sim/engine_facts.py", *FORMULAS)):
                others.append(f"{caller.co_filename}:{caller.co_name} -> {code.co_name}")

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return derives, others


def test_planner_simulate_derives_the_engines_facts_once(capsys):
    # the fit check, the run, its floors and two interval runs: one derivation, no formula called elsewhere
    args = ["simulate", str(SCENARIOS / "a10_qwen7b.yaml"), "--json", "--intervals", "2"]
    derives, others = _calls_into_the_formulas(lambda: main(args))
    assert '"intervals"' in capsys.readouterr().out
    assert (derives, others) == (1, [])


def test_a_pool_of_its_own_derives_its_facts_from_its_gpus_and_settings():
    # What a fleet's second pool (or a draft model) does: its own hardware and engine, no scenario of its own.
    s = load_scenario(SCENARIOS / "h100x4_llama31_70b_tp4.yaml")
    hardware = dataclasses.replace(s.hardware, tensor_parallel_size=8)
    engine = dataclasses.replace(s.engine, max_num_seqs=64, enforce_eager=True)
    pool = EngineFacts.derive(s.model, s.dtype, hardware, engine)
    same = EngineFacts.of(dataclasses.replace(s, hardware=hardware, engine=engine))
    assert pool == same
    here = EngineFacts.of(s)
    assert pool.kv_bytes_per_token * 2 == here.kv_bytes_per_token  # 8 KV heads over 8 ranks, not 4
    assert pool.eager and pool.cudagraph_capture_size == 0 and here.cudagraph_capture_size == 512
    assert memory_breakdown(pool).weights_bytes == pool.weights_bytes < here.weights_bytes
    assert CostModel(pool).serial and not CostModel(here).serial


def test_kv_heads_fewer_than_the_ranks_are_replicated_in_the_tensor_parallel_advice():
    # Llama-3.1-70B has 8 KV heads: at tp 16 each rank still holds one whole head, the same KV per token as at
    # tp 8, which the advice on how many GPUs fit counts (a KV scaled by 8/16 would be half of what is held).
    s = load_scenario(SCENARIOS / "h100x4_llama31_70b_tp4.yaml")
    at = {tp: EngineFacts.of(dataclasses.replace(s, hardware=dataclasses.replace(s.hardware, tensor_parallel_size=tp)))
          for tp in (8, 16)}  # fmt: skip
    assert at[16].kv_bytes_per_token == at[8].kv_bytes_per_token
