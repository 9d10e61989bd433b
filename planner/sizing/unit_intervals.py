"""`planner size --intervals N` for prefill/decode units: how much the best unit's answer could move, drawn as a
replica's is (planner/sizing/intervals.py): N workload seeds, each with one draw of every pool's cost-model
coefficients from the std its provenance carries; per draw, one unit at its share of the demand (every request
run) and the same capacity search as the nominal one, started at the nominal capacity, under the unit's analytic
bound with the drawn coefficients. Draws are made here, pool by pool in the fleet's order, before any run."""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, wait
from dataclasses import dataclass

import numpy as np

from planner.calibration.intervals import draw_coefficients
from planner.sizing.bound import Shape
from planner.sizing.executor import Executor
from planner.sizing.intervals import Draw, Nominal, draw_capacity, summarize, varies
from planner.sizing.probe import run_probe
from planner.sizing.question import Probe, SizingQuestion
from planner.sizing.search import tightest, workload_shape
from planner.sizing.topology import TopologyComparison, Unit, unit_bound
from sim.cost_coefficients import CostCoefficients


@dataclass(frozen=True)
class UnitDrawTask:
    """One draw of one unit (picklable)."""

    unit: Unit
    kind: str  # rate | users
    load: float  # per unit: its share of the demand
    seed: int
    coefficients: dict[str, CostCoefficients]  # drawn, by pool
    probe: Probe
    capacity_guess: float | None  # the nominal capacity; None: not searched (it had none)
    shape: Shape
    tpot_bound_ms: float | None
    slo: object  # the scenario's SloConfig (unit_bound's users bound reads its E2E)


def evaluate_unit_draw(task: UnitDrawTask) -> Draw:
    """One draw's run at the load and its capacity search (runs in a worker)."""
    workload = dataclasses.replace(task.unit.scenario.workload, seed=task.seed)
    scenario = dataclasses.replace(task.unit.scenario, workload=workload)
    n, coefficients = task.probe.num_requests, task.coefficients
    at_load = run_probe(scenario, task.kind, task.load, n, coefficients, stop_early=False)
    upper = None
    if task.capacity_guess is not None:
        drawn_unit = dataclasses.replace(task.unit, coefficients=coefficients)  # the bound moves with the draw
        upper = unit_bound(drawn_unit, task.shape, task.tpot_bound_ms, task.slo, task.kind)
    return draw_capacity(task, at_load, upper, lambda x: run_probe(scenario, task.kind, x, n, coefficients))


def run_unit_intervals(
    c: TopologyComparison,
    q: SizingQuestion,
    num_runs: int,
    workers: int,
    ray_address: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> None:
    """Fill c.intervals for the best unit (nothing when no unit meets the SLOs at the demand)."""
    if c.best is None:
        return
    start = time.perf_counter()
    u, ev = c.best.unit, c.best.evaluation
    d, seed = q.search.demand, q.scenario.workload.seed
    shape = workload_shape(q)
    rng = np.random.default_rng([seed, zlib.crc32(u.label.encode())])
    pools = [pool.name for pool in u.scenario.fleet.pools]
    draws = [
        {name: draw_coefficients(u.coefficients[name], u.uncertainty.get(name, {}), rng) for name in pools}
        for _ in range(num_runs)
    ]
    guess = ev.capacity.load if ev.capacity.load > 0 else None
    tpot_bound = tightest(q.scenario.slo.tpot_ms)
    tasks = [
        UnitDrawTask(
            u, d.kind, ev.at_demand.load, seed + i, drawn, q.search.probe, guess, shape, tpot_bound, q.scenario.slo
        )
        for i, drawn in enumerate(draws)
    ]
    with Executor(evaluate_unit_draw, workers, ray_address) as submit:
        futures = [submit(t) for t in tasks]
        pending, done = set(futures), 0
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            done += len(finished)
            if progress:
                progress(done, len(tasks))
    results = [f.result() for f in futures]
    drawn_names = {name: _drawn(u.uncertainty.get(name, {})) for name in pools}
    kinds = {u.provenance_kind.get(name, "spec-sheet") for name in pools}
    kind = kinds.pop() if len(kinds) == 1 else "mixed"
    text = "; ".join(
        f"{name}: {varies(u.provenance_kind.get(name, 'spec-sheet'), drawn_names[name])}" for name in pools
    )
    drawn = sorted({f"{name}.{n}" for name in pools for n in drawn_names[name]})
    nominal = Nominal(ev.capacity.load, True, ev.units, None, per="unit")
    c.intervals = {"label": u.label, **summarize(results, q, nominal, kind, drawn, text)}
    c.interval_simulations = sum(r.num_simulations for r in results)
    c.interval_wall_s = time.perf_counter() - start


def _drawn(uncertainty: dict[str, float]) -> list[str]:
    return sorted(n for n, s in uncertainty.items() if s > 0 and math.isfinite(s))
