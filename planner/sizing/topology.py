"""Aggregated against disaggregated: prefill/decode units (`search.disaggregated`) weighed against the aggregated
search's recommendation at the same demand, SLOs and money model.

A unit is what a disaggregated deployment scales by: `x` prefill replicas and `y` decode replicas behind one proxy
(xPyD, as vLLM's disaggregated-serving proxy, llm-d and Dynamo deploy them), its KV pulled over the sizing file's
link. Each unit is a fleet scenario (planner/scenario/fleet.py checks it as it checks a file's `fleet:`), run by
the fleet simulator (sim/fleet.py) through the same probes and capacity search as a replica
(planner/sizing/probe.py, capacity.py): its capacity is the highest load one unit serves within the SLOs, the
demand x headroom needs ceil(demand x headroom / capacity) units, and their GPUs are priced per role.

Simplified: units are independent (the proxy of one unit never sends to another's replicas; a fleet-wide router
could balance them better), every unit is the same xPyD, and a length-threshold two-pool fleet is not searched.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import catalog_gpu, gpu_names
from planner.errors import ScenarioError
from planner.scenario.load import validate_mapping
from planner.sizing.capacity import Capacity, find_capacity
from planner.sizing.coefficients import resolve_coefficients
from planner.sizing.executor import Executor
from planner.sizing.money import costs, prices, replicas_needed
from planner.sizing.probe import ProbeResult, run_probe, scenario_at
from planner.sizing.question import Demand, Probe, SizingQuestion
from sim.config import GpuSpec, Scenario
from sim.cost_model import CostCoefficients
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.memory_fit import fit_problems

ROLES = ("prefill", "decode")


@dataclass(frozen=True)
class Unit:
    """One xPyD unit to size: its fleet scenario and each pool's coefficients."""

    index: int
    label: str  # "1P2D: prefill h100-sxm tp4, decode h200 tp4"
    gpus: dict[str, GpuSpec]  # by role
    tensor_parallel_sizes: dict[str, int]
    replicas: dict[str, int]
    scenario: Scenario  # the unit as a fleet
    coefficients: dict[str, CostCoefficients]  # by pool (= role) name
    provenance: dict[str, str]

    def num_gpus(self, role: str | None = None) -> int:
        roles = ROLES if role is None else (role,)
        return sum(self.replicas[r] * self.tensor_parallel_sizes[r] for r in roles)


@dataclass(frozen=True)
class UnitTask:
    unit: Unit
    demand: Demand
    probe: Probe
    guess: float


@dataclass(frozen=True)
class UnitEvaluation:
    capacity: Capacity
    units: int | None  # for the demand x headroom; None: no capacity
    at_demand: ProbeResult | None  # one unit at its share of the demand (without headroom)
    detail: dict | None  # that run's fleet view: bottleneck pool and what limited it, the KV pulls


@dataclass
class UnitResult:
    unit: Unit
    evaluation: UnitEvaluation
    rental_usd_per_month: float | None
    purchase_usd_per_month: float | None
    objective_usd_per_month: float | None

    @property
    def meets(self) -> bool:
        ev = self.evaluation
        return ev.units is not None and ev.at_demand is not None and ev.at_demand.met


@dataclass
class TopologyComparison:
    results: list[UnitResult]
    pruned: list[tuple[str, str]]  # (label, why it cannot run)
    best: UnitResult | None  # the cheapest unit that meets the SLOs at the demand
    num_simulations: int
    wall_s: float


def enumerate_units(q: SizingQuestion) -> tuple[list[Unit], list[tuple[str, str]]]:
    d = q.search.disaggregated
    units, pruned = [], []
    for pg in d.prefill_gpus:
        for ptp in d.prefill_tensor_parallel_sizes:
            for dg in d.decode_gpus:
                for dtp in d.decode_tensor_parallel_sizes:
                    for x, y in d.ratios:
                        gpus, tps, reps = (
                            {"prefill": pg, "decode": dg},
                            {"prefill": ptp, "decode": dtp},
                            {"prefill": x, "decode": y},
                        )
                        label = f"{x}P{y}D: prefill {pg.name} tp{ptp}, decode {dg.name} tp{dtp}"
                        scenario, why = _build(q, gpus, tps, reps)
                        if why is not None:
                            pruned.append((label, why))
                            continue
                        coefficients, provenance = {}, {}
                        for pool in scenario.fleet.pools:
                            coefficients[pool.name], prov = resolve_coefficients(scenario.pool_scenario(pool))
                            provenance[pool.name] = prov.label
                        units.append(Unit(len(units), label, gpus, tps, reps, scenario, coefficients, provenance))
    return units, pruned


def _build(q: SizingQuestion, gpus: dict, tps: dict, reps: dict) -> tuple[Scenario | None, str | None]:
    """The unit as a fleet scenario, through the scenario loader's own fleet checks and the memory model."""
    raw = copy.deepcopy(q.raw)
    hardware = raw.pop("hardware", None) or {}
    pools = {}
    for role in ROLES:
        pool_hw = {"gpu": _gpu_value(gpus[role]), "tensor_parallel_size": tps[role], "replicas": reps[role]}
        if hardware.get("expert_parallel") and tps[role] > 1:  # vLLM ignores the flag on one GPU
            pool_hw["expert_parallel"] = True
        pools[role] = {"role": role, "hardware": pool_hw}
    raw["fleet"] = {
        "pools": pools,
        "router": {"policy": "least_outstanding"},
        "kv_transfer": q.search.disaggregated.kv_transfer_raw,
    }
    try:
        scenario = validate_mapping(raw, q.source, Path(q.source).absolute().parent)
    except ScenarioError as e:
        return None, str(e).removeprefix(f"{q.source}: ")
    for pool in scenario.fleet.pools:
        if pool.hardware.tensor_parallel_size > 1 and not pool.hardware.gpu.interconnect_bandwidth_gbps:
            return None, f"{pool.name}: tensor parallel needs {pool.hardware.gpu.name}'s interconnect_bandwidth_gbps"
        facts = EngineFacts.of(scenario.pool_scenario(pool))
        problems = fit_problems(facts, memory_breakdown(facts))
        if problems:
            return None, f"{pool.name} does not fit: " + "; ".join(problems)
    return scenario, None


def _gpu_value(gpu: GpuSpec):
    """A GPU as a scenario file writes it: its catalog name, or its figures (an inline GPU, or a catalog one
    with other figures)."""
    if gpu.name in gpu_names() and catalog_gpu(gpu.name) == gpu:
        return gpu.name
    return dataclasses.asdict(gpu)


def evaluate_unit(task: UnitTask) -> UnitEvaluation:
    """One unit's capacity search, and its run at its share of the demand (runs in a worker)."""
    u, d = task.unit, task.demand

    def probe(load: float) -> ProbeResult:
        return run_probe(u.scenario, d.kind, load, task.probe.num_requests, u.coefficients)

    capacity = find_capacity(probe, d.kind, task.guess, None, task.probe.max_probes, task.probe.tolerance)
    units = replicas_needed(d, capacity.load, None)
    at_demand = detail = None
    if units is not None:
        share = d.value / units if d.kind == "rate" else math.ceil(d.value / units)
        at_demand = probe(share)
        detail = _fleet_detail(u, d.kind, share, task.probe.num_requests)
    return UnitEvaluation(capacity, units, at_demand, detail)


def _fleet_detail(u: Unit, kind: str, load: float, num_requests: int) -> dict:
    """What limited the unit at its share of the demand: the fleet summary's bottleneck and the KV pulls."""
    from planner.outputs.fleet_summary import fleet_section
    from sim.fleet import simulate_fleet
    from sim.metrics import summarize

    s = scenario_at(u.scenario, kind, load, num_requests)
    result = simulate_fleet(s, u.coefficients, record_steps=False)
    client = summarize(result.recorder, s.slo)
    section = fleet_section(result, {}, client["duration_s"])
    pulls = section.get("kv_transfer") or {}
    ttft_ms = client["median_ttft_ms"]
    transfer_ms = pulls.get("median_transfer_ms")
    return {
        "bottleneck_pool": section["bottleneck_pool"],
        "limited_by": section["pools"][section["bottleneck_pool"]]["limited_by"],
        "median_ttft_ms": ttft_ms,
        "median_transfer_ms": transfer_ms,
        "transfer_share_of_median_ttft": transfer_ms / ttft_ms if transfer_ms is not None and ttft_ms else None,
        "prefill_busy_share": section["pools"]["prefill"]["busy_share"],
        "decode_busy_share": section["pools"]["decode"]["busy_share"],
    }


def compare_topologies(
    q: SizingQuestion,
    guess_per_gpu: float | None,
    workers: int,
    ray_address: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> TopologyComparison:
    """Every unit of `search.disaggregated`, sized for the demand. `guess_per_gpu`: the load one GPU of the
    aggregated recommendation serves (the first probe of a unit scales it by the unit's GPUs)."""
    start = time.perf_counter()
    units, pruned = enumerate_units(q)
    d = q.search.demand
    tasks = []
    for u in units:
        guess = (guess_per_gpu or d.value / 8) * u.num_gpus()
        tasks.append(UnitTask(u, d, q.search.probe, max(1.0, round(guess)) if d.kind == "users" else guess))
    evaluations: list[UnitEvaluation] = []
    with Executor(evaluate_unit, workers, ray_address) as submit:
        futures = [submit(t) for t in tasks]
        for done, future in enumerate(futures, 1):
            evaluations.append(future.result())
            if progress is not None:
                progress(done, len(futures))
    results = [_priced(q, u, ev) for u, ev in zip(units, evaluations)]
    meeting = [r for r in results if r.meets and r.objective_usd_per_month is not None]
    best = min(meeting, key=lambda r: (r.objective_usd_per_month, r.unit.index), default=None)
    sims = sum(len(ev.capacity.probes) + (ev.at_demand is not None) * 2 for ev in evaluations)
    return TopologyComparison(results, pruned, best, sims, time.perf_counter() - start)


def _priced(q: SizingQuestion, u: Unit, ev: UnitEvaluation) -> UnitResult:
    """The units' GPUs priced per role (planner/sizing/money.py: rented, or bought and powered)."""
    money = q.search.money
    if ev.units is None:
        return UnitResult(u, ev, None, None, None)
    per_role = [costs(prices(u.gpus[role], money), money, ev.units * u.num_gpus(role), 0.0) for role in ROLES]
    rent = _total([c.rental_usd_per_month for c in per_role])
    buy = _total([c.purchase_usd_per_month for c in per_role])
    return UnitResult(u, ev, rent, buy, buy if money.objective == "purchase" else rent)


def _total(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(values)
