"""The observed workload of a bench-serve file, rebuilt as a scenario the simulator replays: each request's
prompt and reply length from the per-request lists, its arrival from `start_times`; what had to be assumed
instead is said. And the per-request figures both sides are compared on (`Latencies`).

Arrivals without `start_times` (files of vLLM before 2025): a rate without a concurrency cap is vLLM's own
generator (gamma intervals of shape `burstiness`, Poisson at 1), drawn here from the scenario's seed, so the
requests' order is kept but not their times; `inf` with a `max_concurrency` is a closed loop of that many users;
`inf` alone sends every request at once. A rate with a cap needs the times (the simulator has no such process).
Prompts share no prefix (the files do not say which do).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.errors import PlannerError
from planner.vllm_files.bench_read import BenchRun
from sim.config import ArrivalConfig, Distribution, Scenario, TraceConfig


@dataclass(frozen=True)
class Latencies:
    """Per request, in sending order: what bench serve measures (seconds)."""

    arrival_s: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    output_tokens: np.ndarray

    def tpot_s(self, mask: np.ndarray) -> np.ndarray:
        multi = mask & (self.output_tokens > 1)
        return (self.e2e_s[multi] - self.ttft_s[multi]) / (self.output_tokens[multi] - 1)


def observed(run: BenchRun) -> Latencies:
    start = run.start_s if run.start_s is not None else np.full(len(run), np.nan)
    return Latencies(start, run.ttft_s, run.e2e_s, run.output_tokens)


def simulated(recorder) -> Latencies:
    """The simulator's requests in request_id order: the replay's sending order."""
    req = recorder.requests.view()
    order = np.argsort(req["request_id"], kind="stable")
    arrival = req["arrival_s"][order]
    return Latencies(
        arrival, req["first_token_s"][order] - arrival, req["finished_s"][order] - arrival, req["output_tokens"][order]
    )


def growing_ttft(lat: Latencies, mask: np.ndarray) -> bool | None:
    """Saturation seen from the requests, as a bench file shows it (no engine queue there; one rule for the three
    ways): the mean TTFT of requests sent in the last quarter above 1.5x that of the second quarter
    (validate.saturated's rule on the waiting queue, read through its effect)."""
    arrival, ttft = lat.arrival_s[mask], lat.ttft_s[mask]
    if not np.all(np.isfinite(arrival)) or len(arrival) < 8:
        return None
    q = np.quantile(arrival, [0.25, 0.5, 0.75])
    late, middle = ttft[arrival >= q[2]], ttft[(arrival >= q[0]) & (arrival < q[1])]
    return bool(len(middle) and np.mean(late) > 1.5 * np.mean(middle))


def _arrival(run: BenchRun) -> tuple[ArrivalConfig, str | None, str]:
    """The arrival process, the trace's arrival column (None: not from the trace) and how it was rebuilt."""
    if run.start_s is not None:
        return ArrivalConfig("trace"), "arrived_at", "arrivals: the file's start_times"
    if math.isinf(run.request_rate) and run.max_concurrency is not None:
        return (
            ArrivalConfig("closed", concurrency=run.max_concurrency),
            None,
            f"ASSUMED arrivals: no start_times; a closed loop of max_concurrency = {run.max_concurrency} users",
        )
    if math.isinf(run.request_rate):
        return ArrivalConfig("trace"), "arrived_at", "ASSUMED arrivals: no start_times; request_rate inf: all at 0"
    if run.max_concurrency is not None:
        raise PlannerError(
            f"{run.path}: start_times: missing; request_rate = {run.request_rate:g} with max_concurrency ="
            f" {run.max_concurrency} needs each request's send time (vllm bench serve writes start_times since 2025)"
        )
    process = "poisson" if run.burstiness == 1 else "gamma"
    said = (
        f"ASSUMED arrivals: no start_times; {process} at {run.request_rate:g} requests/s"
        f" (burstiness {run.burstiness:g}), drawn from the scenario's seed"
    )
    return ArrivalConfig(process, rate=run.request_rate, burstiness=run.burstiness), None, said


def replay_scenario(scenario: Scenario, run: BenchRun, trace_path: Path, engine: dict) -> tuple[Scenario, str]:
    """The scenario serving the file's requests (its lengths written to trace_path, a CSV), its engine
    settings updated by `engine` (the files' facts); and the line saying how the arrivals were rebuilt."""
    too_long = np.flatnonzero(run.prompt_tokens + run.output_tokens > scenario.max_model_len)
    if len(too_long):
        i = int(too_long[0])
        raise PlannerError(
            f"{run.path}: input_lens[{i}] + output_lens[{i}] = {run.prompt_tokens[i] + run.output_tokens[i]}: above"
            f" the scenario's max_model_len {scenario.max_model_len} (the server ran a longer one: set"
            " engine.max_model_len in the scenario)"
        )
    arrival, column, said = _arrival(run)
    times = run.start_s if run.start_s is not None else np.zeros(len(run))
    lengths = (run.prompt_tokens, run.output_tokens)
    return trace_scenario(scenario, times, lengths, arrival, column, trace_path, engine), said


def trace_scenario(
    scenario: Scenario, times, lengths, arrival: ArrivalConfig, column: str | None, trace_path: Path, engine: dict
) -> Scenario:
    """The scenario serving these requests (their lengths, and their times when `column` names the arrival
    column, written to trace_path, a CSV) in order, its engine settings updated by `engine`."""
    prompt, output = lengths
    table = np.column_stack([times, prompt, output])
    np.savetxt(
        trace_path, table, fmt=["%.9f", "%d", "%d"], delimiter=",", header="arrived_at,prompt,output", comments=""
    )
    workload = dataclasses.replace(
        scenario.workload,
        num_requests=len(prompt),
        arrival=arrival,
        prompt_tokens=Distribution("trace"),
        output_tokens=Distribution("trace"),
        trace=TraceConfig(str(trace_path), "prompt", "output", column, "replay"),
        shared_prefix=None,
        too_long="reject",
    )
    return dataclasses.replace(scenario, workload=workload, engine=dataclasses.replace(scenario.engine, **engine))
