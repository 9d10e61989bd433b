"""Step-by-step parity of the two executors of one serving model: `planner simulate` (SimPy, the cost model's
durations) and `planner run --device cpu` (the live engine, wall-clock durations) call the same scheduler and
block pool (sim/), so with eager steps and every request arriving at t = 0 (nothing then depends on a
duration) they must decide the same thing at every step: the same requests with the same token counts, the
same preemptions, the same blocks. Only durations may differ.

What is compared, per run:
- `rows`: steps.csv as each command writes it (`planner simulate --all-steps`: a row per step, the decode
  windows' steps included), every column but the four timings;
- `log`: per step, (request id, new tokens) of every scheduled row, the preemptions and the blocks in use, taken
  where both executors record a step (Scheduler.record_step). The simulator's decode windows apply many steps
  at once without passing there, so its log comes from the reference run that steps one by one
  (fast_forward=False), whose rows are checked to be the command's;
- `requests`: requests.csv's lengths and preemptions, by request.

A case is a name and the `--set` overrides that make it (CASES); `decisions(...)` runs one executor. Add a
topology's case in a line once the live engine runs it.
"""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from pathlib import Path

from helpers import ROOT
from planner.cli import main
from planner.scenario.load import load_scenario
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from sim.fleet import fleet_step_rows, simulate_fleet
from sim.metrics import Recorder
from sim.scheduler import build_scheduler
from sim.scheduler_base import Scheduler
from sim.workload import generate_workload, make_request

SCENARIO = ROOT / "scenarios" / "cpu_tiny.yaml"  # tiny-llama on the CPU, eager
TIMING_COLUMNS = {"start_s", "duration_s", "host_s", "device_s"}
# Every request at t = 0: 12 closed-loop users without think time, one request each.
AT_ZERO = [
    "workload.num_requests=12",
    "workload.arrival={process: closed, concurrency: 12, think_time_s: 0}",
    "workload.prompt_tokens={dist: uniform, low: 8, high: 120}",
    "workload.output_tokens={dist: uniform, low: 2, high: 24}",
]
CASES = {  # name -> --set overrides on SCENARIO, after AT_ZERO
    # whole prompts only, a pool that holds everything
    "plain": [
        "engine.enable_chunked_prefill=false",
        "engine.max_num_batched_tokens=512",
        "engine.num_gpu_blocks_override=256",
    ],
    # prompts split over steps by a 48-token budget
    "chunked": [
        "engine.enable_chunked_prefill=true",
        "engine.max_num_batched_tokens=48",
        "engine.num_gpu_blocks_override=256",
    ],
    # 15 usable blocks of 16 tokens for 12 requests of up to 144 tokens: running requests are preempted
    "preempting": ["engine.max_model_len=160", "engine.num_gpu_blocks_override=16"],
    # groups of 4 share a 32-token prefix: later members hit the prefix cache
    "prefix-sharing": [
        "engine.enable_prefix_caching=true",
        "engine.num_gpu_blocks_override=256",
        "workload.shared_prefix={tokens: 32, group_size: 4}",
    ],
    # request-level batches (the live engine's own command refuses it: run through its step loop, below)
    "static": ["engine.scheduler=static", "engine.num_gpu_blocks_override=256"],
    # speculative decoding: verify rows of 1 + 3 tokens, drafts from a one-layer head (its KV in lookahead slots)
    # or an n-gram lookup that drafts in half the steps, acceptance from the seeded draws of these rates
    "speculative-head": [
        "engine.num_gpu_blocks_override=256",
        (
            "engine.speculative={method: eagle, num_speculative_tokens: 3, synthetic_acceptance_rates: [0.7, 0.45,"
            " 0.25], model: {name: head, model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers:"
            " 1, num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 512, max_position_embeddings: 2048}}"
        ),
    ],
    # an EAGLE-3 head: its LM head over 128 of the 512 tokens, its drafts mapped onto the target's by its d2t table
    "speculative-eagle3": [
        "engine.num_gpu_blocks_override=256",
        (
            "engine.speculative={method: eagle3, num_speculative_tokens: 3, synthetic_acceptance_rates: [0.8, 0.6,"
            " 0.4], model: {name: head3, model_type: llama, hidden_size: 64, intermediate_size: 128, num_hidden_layers:"
            " 1, num_attention_heads: 4, num_key_value_heads: 2, vocab_size: 512, draft_vocab_size: 128,"
            " max_position_embeddings: 2048}}"
        ),
    ],
    "speculative-ngram": [
        "engine.num_gpu_blocks_override=256",
        (
            "engine.speculative={method: ngram, num_speculative_tokens: 3, synthetic_acceptance_rates: [0.8, 0.6,"
            " 0.4], draft_rate: 0.5}"
        ),
    ],
    # a prefill engine and a decode engine, each prompt's KV pulled between them (PD_SCENARIO). One user at a time:
    # the two engines step at once in the simulator and in turn in the live pair, so with several requests in
    # flight which of them share a decode step would depend on the durations
    "pd-pair": ["workload.arrival={process: closed, concurrency: 1, think_time_s: 0}"],
    # a tiny MoE's two data-parallel ranks in lockstep (DP_SCENARIO): the balancer's choice of rank for each request,
    # every rank's steps, the steps where one rank has nothing to run
    "data-parallel": ["engine.num_gpu_blocks_override=256"],
    # ... each rank speculating its own requests (DP_NGRAM_SCENARIO: n-gram, k = 3): verify rows on both ranks
    "data-parallel-ngram": ["engine.num_gpu_blocks_override=256"],
    # prompts from a trace whose block ids (of 32 tokens) say which prefixes repeat: hits exactly there
    "trace-prefix-ids": [
        "engine.enable_prefix_caching=true",
        "engine.num_gpu_blocks_override=256",
        "workload.prompt_tokens={dist: trace}",
        (
            "workload.trace={path: traces/cpu_tiny_prefix_ids.jsonl, prompt_column: input_length, output_column:"
            " output_length, block_ids_column: hash_ids, block_tokens: 32}"
        ),
    ],
    # ... one user at a time on 11 usable blocks with a host tier (OFFLOAD_SCENARIO): the prefixes the pool evicts
    # are loaded back from the tier, copied out of and into the live engine's cache
    "host-tier": [
        "workload.num_requests=24",
        "workload.arrival={process: closed, concurrency: 1, think_time_s: 0}",
        "workload.prompt_tokens={dist: trace}",
        "workload.output_tokens={dist: fixed, value: 4}",
    ],
    # ... and with a disk tier behind a small host tier (DISK_SCENARIO): the first prompts come back from the disk,
    # which the live engine wrote to files
    "disk-tier": [
        "workload.num_requests=64",
        "workload.arrival={process: closed, concurrency: 1, think_time_s: 0}",
        "workload.prompt_tokens={dist: trace}",
        "workload.output_tokens={dist: trace}",
    ],
    # one session of 10 turns, each sent the moment the previous turn's reply is complete (no think time): its
    # whole context found cached each turn. (Sessions start at random times: with two, which turns share a step
    # would depend on the durations.)
    "session-waits": [
        "workload.num_requests=10",
        "workload.arrival=null",
        (
            "workload.sessions={rate: 1000000, min_turns: 10, max_turns: 10, message_tokens: {dist: uniform, low: 4,"
            " high: 24}, turn_gap_s: 0, wait_for_reply: true}"
        ),
        "engine.enable_prefix_caching=true",
        "engine.num_gpu_blocks_override=256",
    ],
}
PD_SCENARIO = ROOT / "scenarios" / "cpu_tiny_pd.yaml"
DP_SCENARIO = ROOT / "scenarios" / "cpu_tiny_moe_dp2.yaml"
DP_NGRAM_SCENARIO = ROOT / "scenarios" / "cpu_tiny_moe_dp_ngram.yaml"
OFFLOAD_SCENARIO = ROOT / "scenarios" / "cpu_tiny_offload.yaml"
DISK_SCENARIO = ROOT / "scenarios" / "cpu_tiny_disk.yaml"
# the cases run on another scenario than SCENARIO
SCENARIO_OF = {
    "pd-pair": PD_SCENARIO,
    "data-parallel": DP_SCENARIO,
    "data-parallel-ngram": DP_NGRAM_SCENARIO,
    "host-tier": OFFLOAD_SCENARIO,
    "disk-tier": DISK_SCENARIO,
}


@dataclass
class Decisions:
    rows: list[dict[str, int]]  # steps.csv without timings, in start order
    log: list[tuple]  # per step: ((request id, new tokens), ...), preemptions, blocks in use
    requests: list[tuple[int, int, int, int]]  # (id, prompt tokens, output tokens, preemptions) by id


def overrides(case: str) -> list[str]:
    """AT_ZERO, but for the keys the case sets itself, then the case's."""
    own = {item.partition("=")[0] for item in CASES[case]}
    return [*(item for item in AT_ZERO if item.partition("=")[0] not in own), *CASES[case]]


def _read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _rows(folder: Path) -> list[dict[str, int]]:
    rows = _read_csv(folder / "steps.csv")
    assert all(row["num_steps"] == "1" for row in rows), "a row per step"
    rows.sort(key=lambda row: float(row["start_s"]))
    return [{k: int(v) for k, v in row.items() if k not in TIMING_COLUMNS} for row in rows]


def _requests(folder: Path) -> list[tuple[int, int, int, int]]:
    fields = ("request_id", "prompt_tokens", "output_tokens", "preemptions")
    return sorted(tuple(int(row[k]) for k in fields) for row in _read_csv(folder / "requests.csv"))


def _logging_steps(monkeypatch) -> list[tuple]:
    """Log every recorded step of a scheduler whose recorder keeps steps (the live engine's warm-up does not)."""
    log: list[tuple] = []
    record_step = Scheduler.record_step

    def logged(self, out, start_s, duration_s, blocks_in_use, *args, **kwargs):
        if self.recorder.record_steps:
            rows = tuple((request.request_id, num_new) for request, num_new in out.scheduled)
            log.append((rows, out.num_preempted, blocks_in_use))
        return record_step(self, out, start_s, duration_s, blocks_in_use, *args, **kwargs)

    monkeypatch.setattr(Scheduler, "record_step", logged)
    return log


def _check_log_is_rows(log: list[tuple], rows: list[dict[str, int]], static: bool) -> None:
    """The log is of the steps in steps.csv: the same preemptions and blocks, step by step, and (continuous
    batching, where a row computes what it is scheduled for) the same rows and tokens."""
    assert len(log) == len(rows)
    for i, ((scheduled, preempted, blocks), row) in enumerate(zip(log, rows)):
        assert (preempted, blocks) == (row["num_preemptions"], row["kv_blocks_used"]), i
        if not static:  # a static batch's row counts its idle members, its tokens the padding
            assert (len(scheduled), sum(n for _, n in scheduled)) == (row["num_seqs"], row["num_tokens"]), i


def _no_figures(monkeypatch) -> None:
    """The commands write their files but draw no figures: figures are no decisions, drawing them costs each
    command about 4 s of CPU here, and tests/test_plots.py draws them."""
    import planner.outputs.plots.draw

    monkeypatch.setattr(planner.outputs.plots.draw, "write_plots", lambda *args, **kwargs: [])


def simulated(case: str, tmp_path: Path, monkeypatch) -> Decisions:
    """`planner simulate --all-steps` of the case, and the reference run's step log."""
    sets, scenario = overrides(case), SCENARIO_OF.get(case, SCENARIO)
    folder = tmp_path / f"simulated-{case}"
    _no_figures(monkeypatch)
    assert main(["simulate", str(scenario), "--all-steps", "--out", str(folder), *_set_args(sets)]) == 0
    with monkeypatch.context() as patch:
        log = _logging_steps(patch)
        loaded = load_scenario(scenario, sets)
        if loaded.fleet is None:
            reference_rows = simulate(loaded, fast_forward=False).recorder.step_rows()
        else:
            reference_rows = fleet_step_rows(simulate_fleet(loaded, fast_forward=False))
    rows = _rows(folder)
    for column in rows[0]:
        if column != "num_steps":
            assert [row[column] for row in rows] == reference_rows[column].tolist(), column
    _check_log_is_rows(log, rows, "engine.scheduler=static" in sets)
    return Decisions(rows, log, _requests(folder))


def measured(case: str, tmp_path: Path, monkeypatch) -> Decisions:
    """`planner run --device cpu` of the case (static: the live engine's step loop, which the command refuses)."""
    sets = overrides(case)
    if "engine.scheduler=static" in sets:
        return _measured_static(sets, monkeypatch)
    folder = tmp_path / f"measured-{case}"
    scenario = SCENARIO_OF.get(case, SCENARIO)
    _no_figures(monkeypatch)
    with monkeypatch.context() as patch:
        log = _logging_steps(patch)
        assert main(["run", str(scenario), "--device", "cpu", "--out", str(folder), *_set_args(sets)]) == 0
    rows = _rows(folder)
    _check_log_is_rows(log, rows, static=False)
    return Decisions(rows, log, _requests(folder))


def _measured_static(sets: list[str], monkeypatch) -> Decisions:
    """The live engine's pieces as run_scenario wires them (runner, pool, warm-up aside), on the static scheduler:
    every request added at t = 0, then gpu_engine.engine.drain's schedule -> execute -> update steps."""
    from gpu_engine.engine import drain
    from gpu_engine.runner import ModelRunner

    scenario = load_scenario(SCENARIO, sets)
    e = scenario.engine
    workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
    runner = ModelRunner(scenario.model, scenario.dtype, "cpu", None, e.block_size, seed=scenario.workload.seed)
    runner.allocate(e.num_gpu_blocks_override)
    recorder = Recorder(e.num_gpu_blocks_override, e.block_size, record_steps=True)
    scheduler = build_scheduler(EngineFacts.of(scenario), e.num_gpu_blocks_override, recorder)
    for index in range(len(workload)):
        scheduler.add_request(make_request(workload, index, 0.0, with_token_ids=True))
    t0 = time.perf_counter()
    with monkeypatch.context() as patch:
        log = _logging_steps(patch)
        drain(scheduler, runner, lambda: time.perf_counter() - t0)
    steps = recorder.step_rows()
    order = sorted(range(len(steps["start_s"])), key=lambda i: steps["start_s"][i])
    rows = [{k: int(v[i]) for k, v in steps.items() if k not in TIMING_COLUMNS} | {"num_steps": 1} for i in order]
    _check_log_is_rows(log, rows, static=True)
    done = recorder.requests.view()
    requests = sorted(
        (int(i), int(p), int(o), int(n))
        for i, p, o, n in zip(done["request_id"], done["prompt_tokens"], done["output_tokens"], done["preemptions"])
    )
    return Decisions(rows, log, requests)


def _set_args(sets: list[str]) -> list[str]:
    return [arg for item in sets for arg in ("--set", item)]


def assert_same_decisions(simulated: Decisions, measured: Decisions) -> None:
    """Step by step: the first step where the two executors decided differently is the failure's message."""
    assert len(simulated.rows) == len(measured.rows), (len(simulated.rows), len(measured.rows))
    for i, (a, b) in enumerate(zip(simulated.rows, measured.rows)):
        assert a == b, f"step {i}: simulated {a} != measured {b}"
    for i, (a, b) in enumerate(zip(simulated.log, measured.log)):
        assert a == b, f"step {i}: simulated scheduled {a} != measured {b}"
    assert len(simulated.log) == len(measured.log)
    assert simulated.requests == measured.requests
