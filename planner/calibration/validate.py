"""Held-out validation: scenarios the fit never saw, run live and simulated, and the simulator's error on each.

The sweep fits single steps; what a planner is judged by is whole runs: queues, chunked prefill, preemption,
prefix hits. So calibrate derives six loads from the calibrated scenario (its model, dtype and engine):
    light       open loop at 30% of the estimated capacity (requests finish about as fast as they come)
    saturated   open loop at 2x capacity (the queue grows: such a run hides errors, and is flagged)
    closed      a closed loop of max_num_seqs / 2 users without think time
    long        prompts of 40-80% of max_model_len, short replies (prefill-bound)
    preemption  long replies from a closed loop over a KV pool of a few requests (recompute preemptions)
    shared      a quarter of every prompt shared by groups of 4, prefix caching on
The capacity is the simulator's (fitted coefficients) for a closed loop of max_num_seqs users. Each runs on
the live engine, then in the simulator with the fitted coefficients and with the spec-sheet ones, and every
figure of the table is compared as (predicted - measured) / measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from planner.calibration.machine_check import MachineCheck, machine_check
from sim.config import ArrivalConfig, Distribution, Scenario, SharedPrefixConfig
from sim.cost_coefficients import CostCoefficients
from sim.kv_manager import cdiv

if TYPE_CHECKING:
    from gpu_engine.sweep_grid import Shape


MAX_ATTEMPTS = 5  # live runs of one held-out scenario while the machine is not as it was during the sweep


HELD_OUT_INTERVAL_RUNS = 10  # runs per held-out scenario for its calibrated intervals


@dataclass
class HeldOutRun:
    """One held-out scenario in the three ways, with what the plots need."""

    name: str
    scenario: Scenario
    measured: dict  # summaries
    calibrated: dict
    uncalibrated: dict
    latencies_ms: dict  # way -> {"ttft": [...], "tpot": [...], "e2el": [...]}
    measured_steps: dict  # steps.csv columns of the live run
    saturated: dict  # way -> bool | None (None: closed loop, cannot run away)
    covered: dict  # metric -> whether the measured value fell inside the calibrated 90% interval (None: no value)
    machine: MachineCheck | None = None
    drafts: dict | None = None  # speculative decoding: the live run's drafting steps, timed (draft_fit.py)
    # the live run's requests' arrivals: a step after idle is timed from the one that woke the engine (wake.py)
    arrival_s: np.ndarray | None = None


def with_load(scenario: Scenario, name: str, engine: dict | None = None, **workload) -> tuple[str, Scenario]:
    """The scenario named `name`, its workload (and engine keys) replaced."""
    wl = dataclasses.replace(scenario.workload, trace=None, too_long="truncate", **workload)
    eng = dataclasses.replace(scenario.engine, **(engine or {}))
    return name, dataclasses.replace(scenario, name=f"{scenario.name}-{name}", workload=wl, engine=eng)


def held_out_scenarios(base: Scenario, num_requests: int, capacity_rps: float) -> list[tuple[str, Scenario]]:
    """The six held-out loads (see the module docstring), num_requests each, seeds unlike the base's."""
    e, max_len = base.engine, base.max_model_len
    short = {"prompt_tokens": Distribution("uniform", low=8, high=max(9, max_len // 4))}
    short["output_tokens"] = Distribution("uniform", low=4, high=max(5, max_len // 6))
    users = max(2, e.max_num_seqs // 2)
    blocks_per_request = cdiv(max_len, e.block_size)
    common = {"num_requests": num_requests}
    return [
        with_load(
            base, "light", **common, seed=101, arrival=ArrivalConfig("poisson", rate=0.3 * capacity_rps), **short
        ),
        with_load(
            base, "saturated", **common, seed=102, arrival=ArrivalConfig("poisson", rate=2 * capacity_rps), **short
        ),
        with_load(base, "closed", **common, seed=103, arrival=ArrivalConfig("closed", concurrency=users), **short),
        with_load(
            base,
            "long",
            **common,
            seed=104,
            arrival=ArrivalConfig("closed", concurrency=max(2, users // 2)),
            prompt_tokens=Distribution("uniform", low=int(0.4 * max_len), high=int(0.8 * max_len)),
            output_tokens=Distribution("uniform", low=4, high=16),
        ),
        with_load(
            base,
            "preemption",
            engine={"num_gpu_blocks_override": 2 * blocks_per_request},
            **common,
            seed=105,
            arrival=ArrivalConfig("closed", concurrency=e.max_num_seqs),
            prompt_tokens=Distribution("uniform", low=8, high=max(9, max_len // 8)),
            output_tokens=Distribution("uniform", low=max_len // 4, high=max_len // 2),
        ),
        with_load(
            base,
            "shared",
            engine={"enable_prefix_caching": True},
            **common,
            seed=106,
            arrival=ArrivalConfig("poisson", rate=0.5 * capacity_rps),
            shared_prefix=SharedPrefixConfig(tokens=max_len // 4, group_size=4),
            prompt_tokens=Distribution("uniform", low=max_len // 4 + 8, high=max_len // 2),
            output_tokens=short["output_tokens"],
        ),
    ]


def estimate_capacity_rps(base: Scenario, coefficients: CostCoefficients, num_requests: int) -> float:
    """Requests/s of the simulated engine kept full: a closed loop of max_num_seqs users, short requests."""
    from sim.driver import simulate

    _, scenario = held_out_scenarios(base, num_requests, 1.0)[2]
    arrival = ArrivalConfig("closed", concurrency=base.engine.max_num_seqs)
    scenario = dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, arrival=arrival))
    result = simulate(scenario, coefficients, record_steps=False)
    finished = result.recorder.requests.view()["finished_s"]
    return len(finished) / float(finished.max())


def saturated(requests: dict[str, np.ndarray], steps: dict[str, np.ndarray], open_loop: bool) -> bool | None:
    """Did the queue still grow when the last request arrived? Mean waiting requests over the last quarter of
    the arrival period against the second quarter (time-weighted by step); None for a closed loop."""
    if not open_loop or len(steps.get("start_s", ())) == 0:
        return None
    last_arrival = float(requests["arrival_s"].max())
    start, duration, waiting = steps["start_s"], steps["duration_s"], steps["num_waiting"]

    def mean_waiting(lo: float, hi: float) -> float:
        inside = (start >= lo * last_arrival) & (start < hi * last_arrival)
        weight = duration[inside].sum()
        return float((waiting[inside] * duration[inside]).sum() / weight) if weight > 0 else 0.0

    late = mean_waiting(0.75, 1.0)
    return bool(late >= 1.0 and late > 1.5 * mean_waiting(0.25, 0.5))


def _latencies(recorder) -> dict[str, np.ndarray]:
    from sim.metrics import per_request_latencies_ms

    lat = per_request_latencies_ms(recorder.requests.view())
    return {"ttft": lat["ttft"], "tpot": lat["tpot"], "e2el": lat["e2el"]}


def coverage(measured: dict, intervals: dict) -> dict[str, bool | None]:
    """Per metric of the intervals: low <= measured <= high (None where either is missing)."""
    out = {}
    for key, interval in intervals["metrics"].items():
        v = measured.get(key)
        known = v is not None and interval["low"] is not None and np.isfinite(v)
        out[key] = bool(interval["low"] <= v <= interval["high"]) if known else None
    return out


def run_held_out(
    base: Scenario,
    coefficients: CostCoefficients,
    device: str,
    num_requests: int,
    progress: Callable[[str], None] = lambda name: None,
    uncertainty: dict[str, float] | None = None,
    interval_runs: int = HELD_OUT_INTERVAL_RUNS,
    reference: tuple[Shape, float] | None = None,
) -> list[HeldOutRun]:
    """Each held-out scenario: live on `device`, simulated with `coefficients` and with the spec-sheet ones,
    and (interval_runs > 0) the calibrated 90% intervals over workload seeds x draws from `uncertainty`.

    With `reference` (the reference step shape and its seconds at the sweep), each live run times that step
    before and after itself; a run on a busier machine than the sweep's (MachineCheck) is run again, up to
    MAX_ATTEMPTS times, and the cleanest is kept and flagged when still busy."""
    from gpu_engine.engine import run_scenario
    from planner.calibration.intervals import simulate_intervals
    from planner.calibration.provenance import Provenance
    from planner.outputs.results import build_summary
    from sim.driver import simulate
    from sim.engine_facts import EngineFacts

    provenance = Provenance("calibrated", "this fit", None, dict(uncertainty or {}))
    # Our live engine is synchronous: compare it with the simulator's serial steps, both eager (the live engine
    # captures no CUDA graphs under enforce_eager, as the simulator prices none).
    base = dataclasses.replace(base, engine=dataclasses.replace(base.engine, enforce_eager=True))

    capacity = estimate_capacity_rps(base, coefficients, num_requests)
    runs = []
    for name, scenario in held_out_scenarios(base, num_requests, capacity):
        progress(name)
        live, check = None, None
        for attempt in range(1, MAX_ATTEMPTS + 1):
            run = run_scenario(scenario, device, reference=reference and reference[0])
            this = machine_check(run.extra, reference and reference[1], attempt)
            if check is None or this.badness < check.badness:
                live, check = run, this
            if this.clean:
                break
            progress(f"{name}: {this.describe()}" + ("; again" if attempt < MAX_ATTEMPTS else ""))
        check = dataclasses.replace(check, attempts=attempt)
        measured = build_summary("measured", scenario, live.recorder, live.memory, 0, 0, live.extra)
        summaries, latencies, flags = {"measured": measured}, {"measured": _latencies(live.recorder)}, {}
        open_loop = live.workload.arrival_s is not None
        flags["measured"] = saturated(live.recorder.requests.view(), live.recorder.steps.view(), open_loop)
        facts = EngineFacts.of(scenario)
        for way, coef in (("calibrated", coefficients), ("uncalibrated", CostCoefficients())):
            sim = simulate(scenario, coef, facts=facts)
            summaries[way] = build_summary(
                "simulated", scenario, sim.recorder, sim.memory.to_dict(), 0, 0, {"cost_model": coef.to_dict()}
            )
            latencies[way] = _latencies(sim.recorder)
            flags[way] = saturated(sim.recorder.requests.view(), sim.recorder.steps.view(), open_loop)
        covered = {}
        if interval_runs > 0:
            covered = coverage(measured, simulate_intervals(scenario, facts, coefficients, provenance, interval_runs))
        runs.append(
            HeldOutRun(
                name,
                scenario,
                measured,
                summaries["calibrated"],
                summaries["uncalibrated"],
                latencies,
                {k: v.copy() for k, v in live.recorder.steps.view().items()},
                flags,
                covered,
                check,
                live.drafts,
                live.recorder.requests.view()["arrival_s"].copy(),
            )
        )
    return runs
