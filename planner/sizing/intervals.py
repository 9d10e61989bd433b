"""`planner size --intervals N`: how much the answer could move, for the recommendation and its runner-ups.

The same two unknowns as `planner simulate --intervals N` (planner/calibration/intervals.py): which requests
come (N workload seeds) and the cost model's coefficients (one draw per run from the std its provenance
carries: a calibration's fit, or a transfer's leave-one-GPU-out spread; spec-sheet coefficients carry none,
so their runs vary the seeds only and the report says the model's own error is not in them).

Per picked candidate and draw, two things run with the drawn seed and coefficients:
- one replica at its share of the demand, every request run (no early stop): the 90% interval of each
  latency percentile and, per SLO, the share of draws that met it;
- the same capacity search as the nominal one (probes to search.probe.tolerance, at most
  search.probe.max_probes), started at the nominal capacity with a step that starts at the tolerance and
  squares after each probe (capacity.find_capacity's gallop), under the analytic bound of the drawn
  coefficients. A close start makes most draws' searches two or three runs, a far one is still bracketed;
  the interval has the nominal search's resolution (the tolerance), and a search that runs out of probes
  before a failing load is counted and reported (its capacity is a lower bound).
Draws are made here, in candidate order, before any run: the same answer with any number of workers.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass

import numpy as np

from planner.calibration.intervals import HIGH_Q, LOW_Q, draw_coefficients
from planner.sizing.bound import Shape, analyse, users_bound
from planner.sizing.candidates import Candidate
from planner.sizing.capacity import find_capacity
from planner.sizing.executor import Executor
from planner.sizing.money import replicas_needed
from planner.sizing.probe import ProbeResult, run_probe
from planner.sizing.question import Probe
from planner.sizing.rank import Ranking
from planner.sizing.search import Result, SizingResult, e2e_bound_ms, tightest, workload_shape
from sim.cost_coefficients import CostCoefficients

LATENCIES = ("p50_ttft", "p99_ttft", "p50_tpot", "p99_tpot", "p50_e2el", "p99_e2el")


@dataclass(frozen=True)
class DrawTask:
    """One draw of one candidate (picklable)."""

    candidate: Candidate
    kind: str  # rate | users
    load: float  # per replica: its share of the demand (or, for a candidate with none, its lightest load)
    seed: int
    coefficients: CostCoefficients
    probe: Probe
    capacity_guess: float | None  # the nominal capacity; None: not searched (it had none)
    shape: Shape
    tpot_bound_ms: float | None
    e2e_bound_ms: float | None


@dataclass(frozen=True)
class Draw:
    at_load: ProbeResult
    capacity: float | None
    capacity_open: bool  # the search ran out of probes before a failing load: the capacity is a lower bound
    num_simulations: int
    simulation_wall_s: tuple[float, ...]


def evaluate_draw(task: DrawTask) -> Draw:
    """One draw's run at the load and its capacity search (runs in a worker)."""
    workload = dataclasses.replace(task.candidate.scenario.workload, seed=task.seed)
    scenario = dataclasses.replace(task.candidate.scenario, workload=workload)
    n, coefficients = task.probe.num_requests, task.coefficients
    facts = task.candidate.facts  # the seed changes none
    at_load = run_probe(scenario, task.kind, task.load, n, coefficients, stop_early=False, facts=facts)
    upper = None
    if task.capacity_guess is not None:
        a = analyse(facts, coefficients, task.shape, task.tpot_bound_ms)  # the bound moves with the draw
        upper = a.rate_bound if task.kind == "rate" else users_bound(a, task.shape, task.e2e_bound_ms)
    return draw_capacity(
        task, at_load, upper, lambda x: run_probe(scenario, task.kind, x, n, coefficients, facts=facts)
    )


def draw_capacity(task, at_load: ProbeResult, upper: float | None, probe: Callable[[float], ProbeResult]) -> Draw:
    """A draw's capacity search (none when the nominal had no capacity), from the nominal capacity under the drawn
    bound `upper`, with `probe` running the drawn scenario and coefficients at a load; `task`: a replica's or a
    unit's draw (its load kind, probe settings and nominal capacity)."""
    walls = [at_load.wall_s]
    capacity, open_ended = None, False
    if task.capacity_guess is not None:
        found = find_capacity(
            probe,
            task.kind,
            task.capacity_guess,
            upper,
            task.probe.max_probes,
            task.probe.tolerance,
            step=1 + task.probe.tolerance,
            gallop=True,
        )
        capacity = found.load
        walls += [p.wall_s for p in found.probes]
        open_ended = capacity > 0 and not bracketed(found.load, found.probes, upper, task)
    return Draw(at_load, capacity, open_ended, len(walls), tuple(walls))


def bracketed(load: float, probes: tuple[ProbeResult, ...], upper: float | None, task) -> bool:
    """A failing run above the capacity, or the analytic bound within one tolerance step of it (`task`: a draw's,
    of a replica or of a unit: its probe settings and load kind)."""
    if any(not p.met and p.load > load for p in probes):
        return True
    if upper is None:
        return False
    return upper <= load * (1 + task.probe.tolerance) or (task.kind == "users" and upper - load <= 1)


def interval_picks(ranking: Ranking) -> list[Result]:
    """The recommendation, the runner-ups (the best of each other GPU), the cheapest to buy; when nothing
    meets the SLOs, the closest of each GPU (how likely each is to make it after all)."""
    picks = ([ranking.recommended] if ranking.recommended else []) + [r for r, _ in ranking.runner_ups]
    extra = [ranking.cheapest_to_buy] if ranking.cheapest_to_buy else []
    return picks + [r for r in [*extra, *ranking.closest] if r not in picks]


def run_intervals(
    out: SizingResult,
    ranking: Ranking,
    num_runs: int,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Fill `intervals` of each picked result and the totals of `out` (interval_runs, ...)."""
    start = time.perf_counter()
    q = out.question
    d, slo = q.search.demand, q.scenario.slo
    shape = workload_shape(q)
    tpot_bound, e2e_bound = tightest(slo.tpot_ms), e2e_bound_ms(slo, shape)
    seed = q.scenario.workload.seed
    jobs: list[tuple[Result, list[DrawTask]]] = []
    for r in interval_picks(ranking):
        ev, c = r.evaluation, r.candidate
        load = ev.at_demand.load if ev.at_demand is not None else ev.capacity.lightest.load
        guess = ev.capacity.load if ev.capacity.load > 0 else None
        rng = np.random.default_rng([seed, zlib.crc32(c.label.encode())])  # not tied to the other candidates
        draws = [draw_coefficients(c.coefficients, c.uncertainty, rng) for _ in range(num_runs)]
        tasks = [
            DrawTask(c, d.kind, load, seed + i, drawn, q.search.probe, guess, shape, tpot_bound, e2e_bound)
            for i, drawn in enumerate(draws)
        ]
        jobs.append((r, tasks))
    total = sum(len(t) for _, t in jobs)
    with Executor(evaluate_draw, workers or out.workers, ray_address) as submit:
        futures = [(r, [submit(t) for t in tasks]) for r, tasks in jobs]
        pending, done = {f for _, fs in futures for f in fs}, 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            done += len(finished)
            if progress:
                progress(done, total)
    for r, fs in futures:
        draws = [f.result() for f in fs]
        r.intervals = summarize_draws(r, draws, out)
        out.interval_picks.append(r)
        out.interval_simulations += sum(dr.num_simulations for dr in draws)
        out.interval_simulation_wall_s += [w for dr in draws for w in dr.simulation_wall_s]
    out.interval_runs = num_runs
    out.interval_wall_s = time.perf_counter() - start


def _spread(values: list[float], whole: bool = False) -> dict:
    """5%, median, 95%; `whole`: values that are counts (users) keep to values that occurred."""
    finite = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if not len(finite):
        return {"low": None, "median": None, "high": None}
    low, mid, high = np.percentile(finite, [LOW_Q, 50, HIGH_Q], method="nearest" if whole else "linear")
    return {"low": float(low), "median": float(mid), "high": float(high)}


def summarize_draws(r: Result, draws: list[Draw], out: SizingResult) -> dict:
    c, ev = r.candidate, r.evaluation
    drawn = sorted(n for n, s in c.uncertainty.items() if s > 0 and math.isfinite(s))
    nominal = Nominal(ev.capacity.load, ev.at_demand is not None, ev.replicas, out.question.search.replicas)
    return summarize(draws, out.question, nominal, c.provenance_kind, drawn, varies(c.provenance_kind, drawn))


@dataclass(frozen=True)
class Nominal:
    """The nominal answer the draws are held against: a replica's (or a prefill/decode unit's)."""

    capacity: float  # per replica or unit; 0: none
    at_demand: bool  # its run was at the demand's share (else at the lightest load tried)
    count: int | None  # replicas (or units) deployed; None: none enough
    allowed: tuple[int, ...] | None  # the counts allowed (search.candidates.replicas); None: any
    per: str = "replica"  # what a capacity is of, and what is counted: replica | unit


def summarize(draws: list[Draw], q, nominal: Nominal, kind: str, drawn: list[str], varies_text: str) -> dict:
    """The draws' spreads: latencies at the load, each SLO's share of draws met, the capacity and the count the
    demand needs; `kind` and `drawn`: the provenance and the coefficients drawn, `varies_text` in words."""
    d, seed, per = q.search.demand, q.scenario.workload.seed, nominal.per
    at = [dr.at_load for dr in draws]
    slo = []
    for j, (metric, stat, bound, _, _) in enumerate(at[0].checks):
        known = [p.checks[j][4] for p in at if p.checks[j][4] is not None]
        slo.append({"metric": metric, "stat": stat, "bound_ms": bound,
                    "probability_met": float(np.mean(known)) if known else None})  # fmt: skip
    capacity = replicas = covers = None
    if nominal.capacity > 0:
        caps = [dr.capacity for dr in draws]
        capacity = _spread(caps, whole=d.kind == "users")
        need = [replicas_needed(d, cap, nominal.allowed) for cap in caps]
        need_sorted = sorted(math.inf if n is None else n for n in need)
        replicas = {  # the 5% and 95% of the draws' counts, by rank (counts are whole)
            "low": _count(need_sorted[int(LOW_Q / 100 * (len(need_sorted) - 1))]),
            "high": _count(need_sorted[math.ceil(HIGH_Q / 100 * (len(need_sorted) - 1))]),
            "share_none_enough": float(np.mean([n is None for n in need])),  # no capacity, or too few allowed
        }
        if nominal.count is not None:
            covers = float(np.mean([n is not None and n <= nominal.count for n in need]))
    return {
        "runs": len(draws),
        "seeds": [seed, seed + len(draws) - 1],
        "provenance_kind": kind,
        "coefficients_drawn": drawn,
        "varies": varies_text,
        "load": at[0].load,
        "at": "the demand's share" if nominal.at_demand else "the lightest load tried",
        "latency_ms": {k: _spread([p.latency_ms[k] for p in at]) for k in LATENCIES},
        "slo": slo,
        "probability_all_met": float(np.mean([p.met for p in at])),  # every SLO, in a steady state
        f"capacity_per_{per}": capacity,
        "capacity_searches_open": sum(dr.capacity_open for dr in draws),  # out of probes: lower bounds
        f"{per}s_needed": replicas,
        f"probability_{per}s_suffice": covers,  # the nominal count covers demand x headroom
        "num_simulations": sum(dr.num_simulations for dr in draws),
    }


def _count(n: float) -> int | None:
    return None if math.isinf(n) else int(n)


def varies(kind: str, drawn: list[str]) -> str:
    """What an interval's draws vary, in words."""
    if drawn:
        source = {
            "calibrated": "the calibration fit's std",
            "transferred": "the leave-one-GPU-out spread of the transfer",
        }.get(kind, "the profile's std")
        return f"workload seeds x coefficient draws from {source} ({', '.join(drawn)})"
    return (
        "workload seeds only: these coefficients carry no uncertainty, so the cost model's own error is not in"
        " the interval (unknown, not zero)"
    )
