"""The search: analytic figures for every candidate, then the simulator for those that can still win, in
waves over worker processes (or a Ray cluster), pruning between waves.

Pruning is deterministic (it depends on finished waves only, never on which worker finished first), so the
same sizing file gives the same report with any number of workers. Per GPU, a candidate whose analytic cost
floor (the replicas its throughput bound needs, priced) is not below the cheapest cost already simulated on
that GPU cannot beat that GPU's best and is not simulated (costs come in whole GPUs, so an equal floor can
at most tie); every GPU keeps its best configuration in the report, and the Pareto front is drawn over the
simulated candidates. A candidate whose decode step for one request is already slower than the TPOT bound cannot meet
it at any load: only the one closest to it on each GPU is simulated, to show how close it came.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass, field

import numpy as np

from planner.errors import PlannerError
from planner.outputs.prefix_reuse import lru_hit_rates
from planner.sizing.bound import Analytic, Shape, analyse, users_bound
from planner.sizing.candidates import Candidate, Pruned, enumerate_candidates
from planner.sizing.capacity import MIN_RATE_FRACTION, Capacity, find_capacity
from planner.sizing.executor import Executor
from planner.sizing.money import (
    Costs,
    costs,
    objective_usd_per_month,
    objective_usd_per_month_bound,
    prices,
    replicas_needed,
)
from planner.sizing.probe import ProbeResult, run_probe, scenario_at
from planner.sizing.question import Demand, Probe, SizingQuestion
from sim.config import SloConfig
from sim.cost_model import CostModel
from sim.memory import memory_breakdown
from sim.workload import generate_workload

WAVE_SIZE = 16  # candidates simulated between two pruning decisions


@dataclass(frozen=True)
class Task:
    """What a worker needs to evaluate one candidate (picklable)."""

    candidate: Candidate
    demand: Demand
    probe: Probe
    guess: float
    upper: float | None
    replicas_allowed: tuple[int, ...] | None
    step: float = 2.0  # between bracketing probes; close to 1 when the guess comes from a similar candidate
    must_reach: float | None = None  # the capacity it needs to beat the best already found on its GPU


@dataclass(frozen=True)
class Evaluation:
    index: int
    capacity: Capacity
    replicas: int | None
    at_demand: ProbeResult | None  # one replica at its share of the demand (without headroom)


@dataclass
class Result:
    """A candidate with its analytic figures and, when simulated, its evaluation and costs."""

    candidate: Candidate
    analytic: Analytic
    tpot_floor_ms: float  # physics: every weight read once at the spec bandwidth
    cost_floor_usd_per_month: float | None
    memory: dict
    evaluation: Evaluation | None = None
    costs: Costs | None = None
    objective_usd_per_month: float | None = None
    note: str = ""  # why it was not simulated, or why it cannot serve the demand
    intervals: dict | None = None  # with --intervals, for the picked candidates (intervals.summarize_draws)

    @property
    def meets(self) -> bool:
        return self.objective_usd_per_month is not None


@dataclass
class SizingResult:
    question: SizingQuestion
    results: list[Result]  # every candidate that can run, simulated or not
    pruned: list[Pruned]  # candidates that cannot run
    num_simulations: int = 0
    simulation_wall_s: list[float] = field(default_factory=list)
    simulation_cpu_s: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    workers: int = 1
    backend: str = "processes"
    interval_runs: int = 0  # --intervals N (0: not asked)
    interval_picks: list[Result] = field(default_factory=list)  # the candidates with intervals, in pick order
    interval_simulations: int = 0
    interval_simulation_wall_s: list[float] = field(default_factory=list)
    interval_wall_s: float = 0.0

    @property
    def evaluated(self) -> list[Result]:
        return [r for r in self.results if r.evaluation is not None]


def evaluate(task: Task) -> Evaluation:
    """One candidate's capacity search and its run at the demand (runs in a worker)."""
    c, d = task.candidate, task.demand

    def probe(load: float) -> ProbeResult:
        return run_probe(c.scenario, d.kind, load, task.probe.num_requests, c.coefficients, facts=c.facts)

    capacity = find_capacity(
        probe, d.kind, task.guess, task.upper, task.probe.max_probes, task.probe.tolerance, task.step, task.must_reach
    )
    replicas = replicas_needed(d, capacity.load, task.replicas_allowed)
    at_demand = None
    if replicas is not None:
        share = d.value / replicas if d.kind == "rate" else math.ceil(d.value / replicas)
        at_demand = probe(share)
    return Evaluation(c.index, capacity, replicas, at_demand)


def run_search(
    q: SizingQuestion,
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SizingResult:
    start = time.perf_counter()
    candidates, pruned = enumerate_candidates(q)
    if not candidates:
        raise PlannerError(_nothing_runs(q, pruned))
    shape = workload_shape(q)
    tpot_bound = tightest(q.scenario.slo.tpot_ms)
    results = [_analyse(q, c, shape, tpot_bound) for c in candidates]
    _prune_hopeless(results, tpot_bound)
    workers = workers or os.cpu_count() or 1
    out = SizingResult(q, results, pruned, workers=workers, backend="ray" if ray_address else "processes")
    with Executor(evaluate, workers, ray_address) as submit:
        _run_waves(q, out, shape, submit, progress)
    out.wall_s = time.perf_counter() - start
    return out


def _demand_workload(q: SizingQuestion):
    """(the scenario at the demand, its probe's requests, the users' think time): what the shapes are drawn from."""
    s = scenario_at(q.scenario, q.search.demand.kind, q.search.demand.value, q.search.probe.num_requests)
    think = s.workload.arrival.think_time_s if q.search.demand.kind == "users" else 0.0
    return s, generate_workload(s.workload, s.max_model_len), think


def workload_shape(q: SizingQuestion) -> Shape:
    s, wl, think = _demand_workload(q)
    if wl.block_ids is not None:  # a trace's prefix ids or sessions: what an unbounded cache finds, in order
        cacheable = lru_hit_rates(s, [math.inf])[0] * float(wl.prompt_tokens.mean())
    else:
        first_of_group = np.r_[True, wl.prefix_group[1:] != wl.prefix_group[:-1]]  # groups are consecutive requests
        cacheable = float(np.where(first_of_group, 0, np.minimum(wl.prefix_tokens, wl.prompt_tokens - 1)).mean())
    sent = float(wl.output_tokens.sum()) / (len(wl) + wl.num_rejected)
    return Shape(float(wl.prompt_tokens.mean()), float(wl.output_tokens.mean()), think, cacheable, sent)


def split_shapes(q: SizingQuestion, threshold_tokens: int) -> dict[str, tuple[float, Shape]]:
    """A length router's split of the workload: for `short` (prompts up to the threshold) and `long` (the rest),
    the share of the requests and their mean shape. Their cacheable tokens are taken as every prompt token but
    the last where requests share prefixes (which share is not worked out per side), so the bounds built on them
    stay upper bounds."""
    _, wl, think = _demand_workload(q)
    shares = (wl.prefix_group >= 0).any() or wl.block_ids is not None
    out = {}
    for side, mask in (("short", wl.prompt_tokens <= threshold_tokens), ("long", wl.prompt_tokens > threshold_tokens)):
        if not mask.any():
            out[side] = (0.0, None)
            continue
        prompt, output = float(wl.prompt_tokens[mask].mean()), float(wl.output_tokens[mask].mean())
        out[side] = (float(mask.mean()), Shape(prompt, output, think, prompt - 1 if shares else 0.0, output))
    return out


def tightest(bounds: dict[str, float]) -> float | None:
    return min(bounds.values()) if bounds else None


def e2e_bound_ms(slo: SloConfig, shape: Shape) -> float | None:
    """An end-to-end latency that every request meeting the SLOs stays under."""
    if slo.e2el_ms:
        return tightest(slo.e2el_ms)
    if slo.ttft_ms and slo.tpot_ms:
        return tightest(slo.ttft_ms) + max(shape.output_tokens - 1, 0) * tightest(slo.tpot_ms)
    return None


def _analyse(q: SizingQuestion, c: Candidate, shape: Shape, tpot_bound: float | None) -> Result:
    a = analyse(c.facts, c.coefficients, shape, tpot_bound)
    d = q.search.demand
    upper = a.rate_bound if d.kind == "rate" else users_bound(a, shape, e2e_bound_ms(q.scenario.slo, shape))
    floor = None
    if upper is not None:
        replicas = replicas_needed(d, upper, None)
        floor = objective_usd_per_month_bound(
            prices(c.gpu, q.search.money), q.search.money, replicas * c.num_gpus, replicas * c.host_memory_gib
        )
    mem = memory_breakdown(c.facts)
    tpot_floor = CostModel(c.facts, c.coefficients).floors(shape.prompt_tokens)["tpot_floor_ms"]
    return Result(c, a, tpot_floor, floor, mem.to_dict())


def _prune_hopeless(results: list[Result], tpot_bound: float | None) -> None:
    """Candidates whose one-request decode step is over the TPOT bound: keep the closest per GPU."""
    if tpot_bound is None:
        return
    closest: dict[str, Result] = {}
    for r in results:
        if r.analytic.batch1_step_ms > tpot_bound:
            best = closest.get(r.candidate.gpu.name)
            if best is None or r.analytic.batch1_step_ms < best.analytic.batch1_step_ms:
                closest[r.candidate.gpu.name] = r
    for r in results:
        if r.analytic.batch1_step_ms > tpot_bound and closest[r.candidate.gpu.name] is not r:
            r.note = (
                f"not simulated: one request's decode step takes {r.analytic.batch1_step_ms:.1f} ms (cost model;"
                f" the physics floor is {r.tpot_floor_ms:.1f} ms) > the TPOT bound {tpot_bound:g} ms, at any load;"
                f" {closest[r.candidate.gpu.name].candidate.label} comes closest on this GPU"
            )


def _run_waves(q: SizingQuestion, out: SizingResult, shape: Shape, submit, progress) -> None:
    by_gpu: dict[str, list[Result]] = {}
    for r in out.results:
        if not r.note:
            by_gpu.setdefault(r.candidate.gpu.name, []).append(r)
    for queue in by_gpu.values():  # cheapest floor first; among equal floors the highest throughput bound
        queue.sort(key=lambda r: (math.inf if r.cost_floor_usd_per_month is None else r.cost_floor_usd_per_month,
                                  -r.analytic.rate_bound, r.candidate.index))  # fmt: skip
    best: dict[str, float] = {}  # GPU -> the cheapest cost found on it
    best_gpus: dict[str, int] = {}  # GPU -> how many GPUs that cheapest deployment uses
    siblings: dict[tuple, float] = {}  # a layout (Candidate.layout) -> the first capacity found
    done = 0
    while any(by_gpu.values()):
        wave = _next_wave(q, by_gpu, best)
        futures = {submit(_task(q, r, shape, siblings, best_gpus)): r for r in wave}
        pending, finished_in_wave = set(futures), 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            finished_in_wave += len(finished)
            if progress:
                progress(done + finished_in_wave, done + _remaining(out))
        done += len(wave)
        for fut, r in futures.items():  # in candidate order: the same result whatever finished first
            _record(q, out, r, fut.result(), shape)
            gpu = r.candidate.gpu.name
            if r.evaluation.capacity.load > 0:
                siblings.setdefault(r.candidate.layout, r.evaluation.capacity.load)
            if r.objective_usd_per_month is not None and r.objective_usd_per_month < best.get(gpu, math.inf):
                best[gpu], best_gpus[gpu] = r.objective_usd_per_month, r.costs.num_gpus


def _remaining(out: SizingResult) -> int:
    return sum(1 for r in out.results if r.evaluation is None and not r.note)


def _next_wave(q: SizingQuestion, by_gpu: dict[str, list[Result]], best: dict[str, float]) -> list[Result]:
    """Up to WAVE_SIZE candidates, round robin over the GPUs, cheapest floor first; prune the hopeless."""
    wave: list[Result] = []
    while len(wave) < WAVE_SIZE and any(by_gpu.values()):
        for gpu, queue in by_gpu.items():
            while queue and q.search.bound_pruning and _cannot_win(queue[0], best.get(gpu)):
                r = queue.pop(0)
                r.note = (
                    f"not simulated: at best ${r.cost_floor_usd_per_month:,.0f}/month (analytic throughput bound),"
                    f" no cheaper than ${best[gpu]:,.0f}/month already found on {gpu}"
                )
            if queue and len(wave) < WAVE_SIZE:
                wave.append(queue.pop(0))
    return wave


def _cannot_win(r: Result, best_on_gpu: float | None) -> bool:
    # Costs come in whole GPUs: a floor equal to the best already found can at most tie it, never beat it.
    # A candidate that cannot meet TPOT at any load is not competing: its one run shows how close it comes.
    if best_on_gpu is None or r.cost_floor_usd_per_month is None or r.analytic.batch_within_tpot == 0:
        return False
    return r.cost_floor_usd_per_month >= best_on_gpu - 1e-6


def _task(q: SizingQuestion, r: Result, shape: Shape, siblings: dict[tuple, float], best_gpus: dict[str, int]) -> Task:
    d, a, c = q.search.demand, r.analytic, r.candidate
    if a.batch_within_tpot == 0:  # hopeless: one probe at the lightest load shows how close it comes
        lightest = 1.0 if d.kind == "users" else a.rate_bound * MIN_RATE_FRACTION
        one_probe = dataclasses.replace(q.search.probe, max_probes=1)
        return Task(r.candidate, d, one_probe, lightest, lightest, q.search.replicas)
    if d.kind == "rate":
        upper = a.rate_bound
        guess = 0.7 * upper
        tpot_bound = tightest(q.scenario.slo.tpot_ms)
        if a.batch_within_tpot:  # the batch whose steps still meet TPOT, each request taking (O - 1) such steps
            per_request_s = max(shape.output_tokens - 1, 1) * tpot_bound / 1e3
            guess = min(guess, a.batch_within_tpot / per_request_s)
    else:
        upper = users_bound(a, shape, e2e_bound_ms(q.scenario.slo, shape))
        guess = a.batch_within_tpot or a.max_batch
        if upper is not None:
            guess = min(guess, upper)
    step, must_reach = 2.0, None
    sibling = siblings.get(c.layout)
    if sibling is not None:  # the same GPUs in the same layout with other settings: a close first guess
        guess, step = sibling, 1 + q.search.probe.tolerance
    if c.gpu.name in best_gpus and q.search.replicas is None and q.search.bound_pruning:
        # Same GPU, same price per GPU: cheaper means fewer GPUs, i.e. at most this many replicas.
        max_replicas = (best_gpus[c.gpu.name] - 1) // c.num_gpus
        if max_replicas >= 1:  # (0: its cost floor already pruned it)
            must_reach = d.value * d.headroom / max_replicas
            must_reach = math.ceil(must_reach - 1e-9) if d.kind == "users" else must_reach
    return Task(c, d, q.search.probe, max(guess, 1e-3), upper, q.search.replicas, step, must_reach)


def _record(q: SizingQuestion, out: SizingResult, r: Result, ev: Evaluation, shape: Shape) -> None:
    r.evaluation = ev
    out.num_simulations += len(ev.capacity.probes) + (ev.at_demand is not None)
    runs = [*ev.capacity.probes, *([ev.at_demand] if ev.at_demand is not None else [])]
    out.simulation_wall_s += [p.wall_s for p in runs]
    out.simulation_cpu_s += [p.cpu_s for p in runs]
    d = q.search.demand
    if ev.capacity.short_of is not None:
        r.note = (
            f"not cheaper: misses the SLOs at {ev.capacity.short_of:,.3g} {d.unit} per replica, the least it needs"
            f" to use fewer GPUs than the cheapest found on {r.candidate.gpu.name}"
        )
        return
    if ev.capacity.load <= 0:
        r.note = _no_capacity(q, r, ev.capacity)
        return
    if ev.replicas is None:
        need = math.ceil(d.value * d.headroom / ev.capacity.load)
        r.note = f"needs {need} replicas; search.candidates.replicas allows at most {max(q.search.replicas)}"
        return
    tokens_per_s = output_tokens_per_s(d, shape, ev.at_demand)
    c = r.candidate
    r.costs = costs(
        prices(c.gpu, q.search.money), q.search.money, ev.replicas * c.num_gpus, tokens_per_s,
        ev.replicas * c.host_memory_gib,
    )  # fmt: skip
    if ev.at_demand is not None and not ev.at_demand.met:
        r.note = "misses the SLOs at the demand: " + _misses(ev.at_demand, d.unit)
        return
    r.objective_usd_per_month = objective_usd_per_month(r.costs, q.search.money.objective)


def output_tokens_per_s(d: Demand, shape: Shape, at_demand: ProbeResult | None) -> float:
    """The output tokens a second the deployment serves at the demand, for the cost per token. A rate: the
    demand's own (a finite run's throughput ends in a drain that lowers it). Users: the run of one replica's
    share, per user, times the demand's users (replicas x the share can exceed them)."""
    if at_demand is None:
        return 0.0
    if d.kind == "rate":
        return d.value * shape.output_tokens_per_request_sent
    return at_demand.output_throughput * d.value / at_demand.load


def _no_capacity(q: SizingQuestion, r: Result, cap: Capacity) -> str:
    """Why no load passed: the SLOs fail even at the search's lightest load, or its probes ran out first."""
    misses = _misses(cap.lightest, q.search.demand.unit)
    if cap.ran_out and r.analytic.batch_within_tpot != 0:  # (one that cannot meet TPOT gets one probe on purpose)
        return (
            "misses the SLOs at every load its probes reached (search.probe.max_probes ="
            f" {q.search.probe.max_probes} ran out before a lighter load; raise it): {misses}"
        )
    return "misses the SLOs even at the lightest load: " + misses


def _misses(p: ProbeResult, unit: str) -> str:
    missed = [f"{m} {stat} {v:,.1f} ms > {b:g} ms" for m, stat, b, v, ok in p.checks if ok is False]
    if p.stopped:
        missed.append(f"stopped early ({p.stopped})")
    elif p.saturated:
        missed.append("the queue grows to the end of the run")
    unit = unit.removesuffix("s") if unit == "users" and p.load == 1 else unit
    return f"at {p.load:g} {unit}: " + ("; ".join(missed) or "no SLO value")


def _nothing_runs(q: SizingQuestion, pruned: list[Pruned]) -> str:
    """One line, as every error (the CLI escapes a newline: it printed a literal \\n between candidates)."""
    reasons = [f"{p.label}: {p.reason}" for p in pruned[:20]]
    if len(pruned) > 20:
        reasons.append(f"and {len(pruned) - 20} more")
    return f"{q.source}: no candidate can run ({len(pruned)} pruned): " + "; ".join(reasons)


def median_simulation_s(out: SizingResult, cpu: bool = False) -> float | None:
    times = out.simulation_cpu_s if cpu else out.simulation_wall_s
    return statistics.median(times) if times else None
