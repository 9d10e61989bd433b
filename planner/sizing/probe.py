"""One simulation of one replica (or one prefill/decode unit, a fleet) at one load, and its verdict: do the SLOs
hold, and is it a steady state?

A load is a request rate (open loop, the scenario's arrival process at that rate) or a number of users
(closed loop). A run stops early, saying why, once its verdict cannot change: more requests have missed a
percentile bound than that percentile allows over the whole run, or the queue holds a tenth of the run.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass

import numpy as np

from sim.config import ArrivalConfig, Scenario, WorkloadConfig
from sim.cost_coefficients import CostCoefficients
from sim.driver import simulation_class
from sim.engine_facts import EngineFacts
from sim.fleet import FleetSimulation
from sim.metrics import per_request_latencies_ms, summarize
from sim.simulation import Simulation

# A queue growing to the end: requests in the system over the last quarter of the arrivals exceed those
# over the second quarter by this factor (plus a couple, for nearly empty systems). Steady states
# fluctuate far less than 1.5x when averaged over a quarter of the run.
GROWTH_FACTOR = 1.5
GROWTH_SLACK = 2.0
# A slow overload: over the second half of the arrivals, the requests in the system grow by more than this
# fraction of those that arrive (and by more than GROWTH_SLACK). An H100 offered 450 req/s of Llama-3.1-8B with
# 32 + 64 tokens serves about 392: over 6,400 requests the system held 1.37x as many in the last quarter as in
# the second (under GROWTH_FACTOR), yet 10.8% of what arrived in the second half stayed. Steady runs of 6,400
# requests at 300 to 390 req/s there grew by -0.2% to 4.6% (two seeds each); a shorter run fluctuates more
# (1,600 requests at 300 req/s: 6.1%), and one that looks saturated by this alone runs again longer.
UNSERVED_FRACTION = 0.05
QUEUE_STOP_FRACTION = 0.1  # of the run's requests waiting at once: overloaded, stop
# A rate probe whose arrivals span fewer than STEADY_SPANS of its median end-to-end times cannot tell a system
# still filling up from a queue that grows (a 400-request probe at 299 req/s on an H100: its requests take
# 0.57 s, its arrivals 1.33 s, and it read as growing where 3,000 requests ran steady): one that looks
# saturated runs again LONGER_PROBE times longer, up to LONGEST_PROBE times the probe's requests.
STEADY_SPANS = 4
LONGER_PROBE = 4
LONGEST_PROBE = 16


@dataclass(frozen=True)
class ProbeResult:
    load: float  # req/s or users, per replica
    met: bool  # every SLO holds and the run is a steady state
    saturated: bool
    stopped: str | None  # why the run ended early, if it did
    completed: int
    num_requests: int
    request_throughput: float
    output_throughput: float
    latency_ms: dict  # {"p50_ttft": .., "p99_ttft": .., "p50_tpot": .., "p99_tpot": .., "p50_e2el": .., "p99_e2el": ..}
    checks: tuple  # (metric, stat, bound_ms, value_ms, met)
    wall_s: float
    cpu_s: float  # this process's CPU time for the run: the same on a busy machine as on an idle one
    # A data-parallel group's run: what set its lockstep steps (sim/data_parallel.py's stats: all-to-all and
    # routed experts' shares of the step time, the busiest GPU's load over the mean, dummy batches); else None
    data_parallel: dict | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Stop(Exception):
    def __init__(self, reason: str, saturated: bool) -> None:
        super().__init__(reason, saturated)  # SimPy re-raises a process's exception as type(e)(*e.args)
        self.reason, self.saturated = reason, saturated


# A closed loop's users each send this many requests at least: with no more requests than users, every request
# is sent at once and none waits for a reply, so a probe of N users never has more than its requests in flight
# (probes at 1,024 and 1,933 users once gave the same TTFT, and a recommendation missed its own SLOs).
MIN_REQUESTS_PER_USER = 4


def scenario_at(scenario: Scenario, kind: str, load: float, num_requests: int) -> Scenario:
    """The candidate's scenario offered `load`: its own arrival process at that rate, or `load` users (each
    sending MIN_REQUESTS_PER_USER requests or more: num_requests is raised if need be)."""
    a = scenario.workload.arrival
    if kind == "users":
        think = a.think_time_s if a.process == "closed" else 0.0
        arrival = ArrivalConfig(process="closed", concurrency=int(load), think_time_s=think)
        num_requests = max(num_requests, MIN_REQUESTS_PER_USER * int(load))
    elif scenario.workload.sessions is not None:
        # Sessions under way from the start (a capacity is a steady state's), their rate scaled so that their turns
        # arrive at `load`
        steady = dataclasses.replace(scenario.workload.sessions, start="steady")
        base = dataclasses.replace(scenario.workload, sessions=steady)
        sessions = dataclasses.replace(
            steady, rate=steady.rate * load / sessions_request_rate(base, scenario.max_model_len)
        )
        workload = dataclasses.replace(scenario.workload, sessions=sessions, num_requests=num_requests)
        return dataclasses.replace(scenario, workload=workload)
    else:
        process = a.process if a.process in ("poisson", "gamma", "constant", "trace") else "poisson"
        arrival = ArrivalConfig(process=process, rate=float(load), burstiness=a.burstiness)
    workload = dataclasses.replace(scenario.workload, arrival=arrival, num_requests=num_requests)
    return dataclasses.replace(scenario, workload=workload)


@functools.lru_cache(maxsize=64)
def sessions_request_rate(workload: WorkloadConfig, max_model_len: int) -> float:
    """The mean rate (req/s) at which a sessions workload's turns arrive, over its requests: sessions start at
    workload.sessions.rate, each sending its turns over time, so the requests' rate is the sessions' times the
    turns a session has before max_model_len ends it; the load a probe offers is this rate."""
    from sim.workload import generate_workload

    wl = generate_workload(workload, max_model_len)
    span_s = float(wl.arrival_s[-1] - wl.arrival_s[0]) if len(wl) > 1 else 0.0
    if span_s <= 0:  # one request (or all at once): the sessions' own rate is all there is to go by
        return workload.sessions.rate
    return (len(wl) - 1) / span_s


def run_probe(
    scenario: Scenario,
    kind: str,
    load: float,
    num_requests: int,
    coefficients: CostCoefficients | dict[str, CostCoefficients],
    stop_early: bool = True,
    longest: int | None = None,
    facts: EngineFacts | None = None,
) -> ProbeResult:
    """`stop_early=False`: run every request even once the verdict is settled, for latencies of the whole
    run (an interval's draws; a run stopped early reports the latencies of the requests finished by then).
    `longest`: the most requests a run too short to tell saturation from filling up may grow to (default
    LONGEST_PROBE times num_requests). `facts`: the scenario's engine's, when derived already (a load changes
    none)."""
    longest = LONGEST_PROBE * num_requests if longest is None else longest
    start, start_cpu = time.perf_counter(), time.process_time()
    s = scenario_at(scenario, kind, load, num_requests)
    if s.fleet is None:
        sim = simulation_class(s)(s, coefficients, record_steps=False, facts=facts)
        replicas, recorder = sim.replicas, sim.recorder
    else:  # a fleet (planner/sizing/topology.py's prefill/decode units): `coefficients` by pool name
        sim = FleetSimulation(s, coefficients, record_steps=False)
        replicas, recorder = [r for pool in sim.pools for r in pool.replicas], sim.client
    total = len(sim.workload)
    if stop_early:
        sim.progress = _watch(sim, replicas, recorder, s, total)
    stopped, saturated = None, False
    try:
        sim.run()
    except _Stop as e:
        stopped, saturated = e.reason, e.saturated
    summary = summarize(recorder, s.slo)
    if stopped is None and kind == "rate":
        done = recorder.requests.view()
        grows = queue_grows(sim.workload.arrival_s, done["finished_s"])
        saturated = grows or unserved_fraction(sim.workload.arrival_s, done["finished_s"]) > UNSERVED_FRACTION
        # Too short to tell filling up from growing, or a slow growth that a longer run tells from noise.
        undecided = not grows or _too_short(sim.workload.arrival_s, done)
        if saturated and undecided and LONGER_PROBE * num_requests <= longest:
            rerun = run_probe(
                scenario, kind, load, LONGER_PROBE * num_requests, coefficients, stop_early, longest, facts
            )
            return dataclasses.replace(
                rerun,
                wall_s=rerun.wall_s + time.perf_counter() - start,  # this run's time is spent too
                cpu_s=rerun.cpu_s + time.process_time() - start_cpu,
            )
    checks = tuple((c["metric"], c["stat"], c["bound_ms"], c["value_ms"], c["met"]) for c in summary["slo"]["checks"])
    met = stopped is None and not saturated and all(c[4] is not False for c in checks)
    latency = {
        f"{stat}_{name}": summary[f"{'median' if stat == 'p50' else stat}_{name}_ms"]
        for stat in ("p50", "p99")
        for name in ("ttft", "tpot", "e2el")
    }
    return ProbeResult(
        load=float(load),
        met=met,
        saturated=saturated,
        stopped=stopped,
        completed=summary["completed"],
        num_requests=total,
        request_throughput=_finite(summary["request_throughput"]),
        output_throughput=_finite(summary["output_throughput"]),
        latency_ms={k: _finite(v) for k, v in latency.items()},
        checks=checks,
        wall_s=time.perf_counter() - start,
        cpu_s=time.process_time() - start_cpu,
        data_parallel=sim.stats() if s.hardware.data_parallel_size > 1 else None,
    )


def _too_short(arrival_s: np.ndarray, done: dict[str, np.ndarray]) -> bool:
    """The arrivals span fewer than STEADY_SPANS median end-to-end times: too short to judge saturation."""
    if not len(done["finished_s"]) or len(arrival_s) < 2:
        return False
    e2e_s = float(np.median(done["finished_s"] - done["arrival_s"]))
    return STEADY_SPANS * e2e_s > float(arrival_s[-1] - arrival_s[0])


def queue_grows(arrival_s: np.ndarray, finished_s: np.ndarray) -> bool:
    """Requests in the system (arrived, not finished), averaged over the 2nd and the 4th quarter of the
    arrivals: a queue that keeps growing to the end of the run is not a steady state."""
    if len(arrival_s) < 8:
        return False
    in_system = _in_system(arrival_s, finished_s, np.linspace(0.0, float(arrival_s[-1]), 81))
    second, last = in_system[20:41].mean(), in_system[60:].mean()
    return bool(last > GROWTH_FACTOR * second + GROWTH_SLACK)


def _in_system(arrival_s: np.ndarray, finished_s: np.ndarray, at_s: np.ndarray) -> np.ndarray:
    """Requests arrived and not finished at each time of at_s."""
    finished = np.sort(finished_s)
    return np.searchsorted(arrival_s, at_s, side="right") - np.searchsorted(finished, at_s, side="right")


def unserved_fraction(arrival_s: np.ndarray, finished_s: np.ndarray) -> float:
    """How fast the requests in the system (arrived, not finished) grow over the second half of the arrivals
    (a least-squares slope over a grid), as a fraction of the rate they arrive at there: the part of the offered
    load the replica does not serve. 0 when they grow by no more than GROWTH_SLACK requests (noise)."""
    if len(arrival_s) < 8:
        return 0.0
    half_s, last_s = float(arrival_s[-1]) / 2, float(arrival_s[-1])
    arrived = len(arrival_s) - int(np.searchsorted(arrival_s, half_s, side="right"))
    if last_s <= half_s or not arrived:
        return 0.0
    grid = np.linspace(half_s, last_s, 41)
    in_system = _in_system(arrival_s, finished_s, grid)
    slope_per_s = float(np.polyfit(grid, in_system, 1)[0])
    if slope_per_s * (last_s - half_s) <= GROWTH_SLACK:
        return 0.0
    return slope_per_s * (last_s - half_s) / arrived


def _watch(sim: Simulation, replicas: list, recorder, s: Scenario, total: int):
    """A progress callback (every 256 finished requests) that stops a run whose verdict is settled: `replicas`
    are every engine's (a fleet's in all its pools), `recorder` the requests as the client sees them."""
    bounds = [
        (metric, float(stat[1:]), bound)
        for metric in ("ttft_ms", "tpot_ms", "e2el_ms")
        for stat, bound in getattr(s.slo, metric).items()
        if stat != "mean"
    ]

    def watch(done: int, _total: int) -> None:
        if done >= total:
            return  # the run is over anyway: its summary gives the verdict
        waiting = sum(len(r.scheduler.waiting) for r in replicas)
        if sim.workload.arrival_s is not None and waiting > QUEUE_STOP_FRACTION * total:
            raise _Stop(f"{waiting} requests queued at {sim.env.now:.1f} s: overloaded", True)
        if not bounds:
            return
        lat = per_request_latencies_ms(recorder.requests.view())
        for metric, pct, bound in bounds:
            values = lat[metric.removesuffix("_ms")]
            over = int((values > bound).sum())
            # numpy's percentile interpolates between ranks; with more than (1 - q) x (n - 1) + 1 values
            # above the bound among the final n, the q-th percentile is above it whatever comes next.
            if over > (1 - pct / 100) * (total - 1) + 1:
                raise _Stop(f"{over} of {total} requests already over {metric} p{pct:g} {bound:g}", False)

    return watch


def _finite(v) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None
