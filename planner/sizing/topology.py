"""Aggregated against units of two pools: prefill/decode units (`search.disaggregated`) and length-routed units
(`search.length_routed`) weighed against the aggregated search's recommendation at the same demand, SLOs and money
model.

A unit is what such a deployment scales by: `x` prefill replicas and `y` decode replicas behind one proxy (xPyD, as
vLLM's disaggregated-serving proxy, llm-d and Dynamo deploy them), its KV pulled over the sizing file's link; or
`x` replicas serving the prompts up to a threshold and `y` the longer ones behind a router by prompt length (two
pools of different GPUs, as inference-fleet-sim studies). Each unit is a fleet scenario (planner/scenario/fleet.py
checks it as it checks a file's `fleet:`), run by the fleet simulator (sim/fleet.py) through the same probes and
capacity search as a replica (planner/sizing/probe.py, capacity.py): its capacity is the highest load one unit
serves within the SLOs, the demand x headroom needs ceil(demand x headroom / capacity) units, and their GPUs are
priced per role.

Simplified: units are independent (the proxy or router of one unit never sends to another's replicas; a fleet-wide
router could balance them better), and every unit of a deployment is the same.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from planner.catalog import differs_from_catalog, gpu_names
from planner.errors import ScenarioError
from planner.scenario.load import validate_mapping
from planner.sizing.bound import Shape, analyse
from planner.sizing.candidates import settings_words
from planner.sizing.capacity import Capacity, find_capacity
from planner.sizing.coefficients import resolve_coefficients
from planner.sizing.executor import Executor
from planner.sizing.money import costs, prices, replicas_needed
from planner.sizing.probe import ProbeResult, run_probe, scenario_at
from planner.sizing.question import Demand, PoolSettings, Probe, SizingQuestion
from planner.sizing.search import e2e_bound_ms, split_shapes, tightest, workload_shape
from sim.config import GpuSpec, Scenario
from sim.cost_coefficients import CostCoefficients
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
    facts: dict[str, EngineFacts]  # each pool's engine, derived once (by pool = role name)
    coefficients: dict[str, CostCoefficients]  # by pool (= role) name
    provenance: dict[str, str]
    provenance_kind: dict[str, str] = dataclasses.field(default_factory=dict)  # calibrated | transferred | spec-sheet
    uncertainty: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)  # pool -> coefficient -> std
    kind: str = "disaggregated"  # disaggregated (prefill/decode behind a proxy) | length-routed (by prompt length)
    # length-routed: each pool's share of the requests and their mean shape (search.split_shapes), for its bound
    role_shapes: dict[str, tuple[float, Shape | None]] | None = None

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(self.gpus)

    def num_gpus(self, role: str | None = None) -> int:
        roles = self.roles if role is None else (role,)
        return sum(self.replicas[r] * self.tensor_parallel_sizes[r] for r in roles)


@dataclass(frozen=True)
class UnitTask:
    unit: Unit
    demand: Demand
    probe: Probe
    guess: float
    upper: float | None  # a load no steady state of the unit passes (unit_bound), None: unknown


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
    pruned: list[tuple[str, str]]  # (label, why it cannot run, or why it cannot win and was not simulated)
    best: UnitResult | None  # the cheapest unit that meets the SLOs at the demand
    num_simulations: int
    wall_s: float
    kinds: frozenset[str]  # the unit kinds the sizing file asked for (Unit.kind)
    # --intervals N: the best unit's 90% intervals (planner/sizing/unit_intervals.py); None: not asked, or no best
    intervals: dict | None = None
    interval_simulations: int = 0
    interval_wall_s: float = 0.0


def enumerate_units(q: SizingQuestion) -> tuple[list[Unit], list[tuple[str, str]]]:
    """Every prefill/decode unit (search.disaggregated) and length-routed unit (search.length_routed) that can run,
    and why the others cannot."""
    units, pruned = [], []
    d = q.search.disaggregated
    if d is not None:
        fleet = {"router": {"policy": "least_outstanding"}, "kv_transfer": d.kv_transfer_raw}
        roles = itertools.product(
            d.prefill_gpus, d.prefill_tensor_parallel_sizes, d.prefill_engines,
            d.decode_gpus, d.decode_tensor_parallel_sizes, d.decode_engines,
        )  # fmt: skip
        for (pg, ptp, pe, dg, dtp, de), (x, y) in itertools.product(roles, d.ratios):
            label = f"{x}P{y}D: prefill {_pool_label(pg, ptp, pe)}, decode {_pool_label(dg, dtp, de)}"
            pools = {"prefill": (pg, ptp, x, pe), "decode": (dg, dtp, y, de)}
            _add_unit(q, units, pruned, label, pools, fleet, "disaggregated", None)
    r = q.search.length_routed
    if r is not None:
        roles = list(
            itertools.product(
                r.short_gpus,
                r.short_tensor_parallel_sizes,
                r.short_engines,
                r.long_gpus,
                r.long_tensor_parallel_sizes,
                r.long_engines,
            )
        )  # fmt: skip  (every threshold takes every combination)
        for threshold in r.thresholds_tokens:
            shapes = split_shapes(q, threshold)
            router = {"policy": "length", "threshold_tokens": threshold, "short_pool": "short", "long_pool": "long"}
            for (sg, stp, se, lg, ltp, le), (x, y) in itertools.product(roles, r.ratios):
                pools = f"short {_pool_label(sg, stp, se)}, long {_pool_label(lg, ltp, le)}"
                label = f"{x}S{y}L at {threshold:,} tokens: {pools}"
                pools = {"short": (sg, stp, x, se), "long": (lg, ltp, y, le)}
                _add_unit(q, units, pruned, label, pools, {"router": router}, "length-routed", shapes)
    return units, pruned


def _add_unit(q, units: list, pruned: list, label: str, pools: dict, fleet: dict, kind: str, shapes) -> None:
    """The unit of `pools` (role -> GPU, tensor parallel, replicas, engine settings) behind `fleet`'s router (and
    link), appended to units, or its reason to pruned."""
    gpus = {role: p[0] for role, p in pools.items()}
    tps = {role: p[1] for role, p in pools.items()}
    reps = {role: p[2] for role, p in pools.items()}
    scenario, facts, why = _build(q, pools, fleet)
    if why is not None:
        pruned.append((label, why))
        return
    coefficients, provenance, kinds, uncertainty = {}, {}, {}, {}
    for pool in scenario.fleet.pools:
        coefficients[pool.name], prov = resolve_coefficients(scenario.pool_scenario(pool))
        provenance[pool.name], kinds[pool.name] = prov.label, prov.kind
        uncertainty[pool.name] = dict(prov.uncertainty)
    units.append(
        Unit(
            len(units), label, gpus, tps, reps, scenario, facts, coefficients, provenance, kinds, uncertainty, kind,
            shapes,
        )
    )  # fmt: skip


def _pool_label(gpu: GpuSpec, tp: int, engine: PoolSettings) -> str:
    """'h100-sxm tp4', or with the role's swept settings: 'h100-sxm tp4 (seqs 512, tokens 16384)'."""
    words = settings_words(engine.settings)
    return f"{gpu.name} tp{tp}" + (f" ({', '.join(words)})" if words else "")


def _build(q: SizingQuestion, pools: dict, fleet: dict) -> tuple[Scenario | None, dict | None, str | None]:
    """The unit as a fleet scenario and its pools' engine facts, through the scenario loader's own fleet checks and
    the memory model; or why not. `pools`: role -> (GPU, tensor parallel, replicas, engine settings); a prefill or
    decode role is the pool's role, a length-routed pool (short, long) serves whole requests."""
    raw = copy.deepcopy(q.raw)
    hardware = raw.pop("hardware", None) or {}
    fleet_pools = {}
    for role, (gpu, tp, replicas, engine) in pools.items():
        pool_hw = {"gpu": _gpu_value(gpu), "tensor_parallel_size": tp, "replicas": replicas}
        if hardware.get("expert_parallel") and tp > 1:  # vLLM ignores the flag on one GPU
            pool_hw["expert_parallel"] = True
        fleet_pools[role] = {"role": role if role in ROLES else "mixed", "hardware": pool_hw}
        if engine.raw:  # the role's swept settings over the scenario's engine
            fleet_pools[role]["engine"] = dict(engine.raw)
    raw["fleet"] = {"pools": fleet_pools, **fleet}
    try:
        scenario = validate_mapping(raw, q.source, Path(q.source).absolute().parent)
    except ScenarioError as e:
        return None, None, str(e).removeprefix(f"{q.source}: ")
    facts = {}
    for pool in scenario.fleet.pools:
        if pool.hardware.tensor_parallel_size > 1 and not pool.hardware.gpu.interconnect_bandwidth_gbps:
            why = f"{pool.name}: tensor parallel needs {pool.hardware.gpu.name}'s interconnect_bandwidth_gbps"
            return None, None, why
        facts[pool.name] = EngineFacts.of(scenario.pool_scenario(pool))
        problems = fit_problems(facts[pool.name], memory_breakdown(facts[pool.name]))
        if problems:
            return None, None, f"{pool.name} does not fit: " + "; ".join(problems)
    return scenario, facts, None


def _gpu_value(gpu: GpuSpec):
    """A GPU as a scenario file writes it: its catalog name, or its figures (an inline GPU, or a catalog one
    with other figures)."""
    if gpu.name in gpu_names() and not differs_from_catalog(gpu):
        return gpu.name
    return dataclasses.asdict(gpu)


def evaluate_unit(task: UnitTask) -> UnitEvaluation:
    """One unit's capacity search, and its run at its share of the demand (runs in a worker)."""
    u, d = task.unit, task.demand

    def probe(load: float) -> ProbeResult:
        return run_probe(u.scenario, d.kind, load, task.probe.num_requests, u.coefficients)

    capacity = find_capacity(probe, d.kind, task.guess, task.upper, task.probe.max_probes, task.probe.tolerance)
    units = replicas_needed(d, capacity.load, None)
    at_demand = detail = None
    if units is not None:
        share = d.value / units if d.kind == "rate" else math.ceil(d.value / units)
        at_demand = probe(share)
        detail = _fleet_detail(u, d.kind, share, task.probe.num_requests)
    return UnitEvaluation(capacity, units, at_demand, detail)


def _fleet_detail(u: Unit, kind: str, load: float, num_requests: int) -> dict:
    """What limited the unit at its share of the demand: the fleet summary's bottleneck, how busy each pool was,
    and the KV pulls (a prefill/decode unit's)."""
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
        **{f"{role}_busy_share": section["pools"][role]["busy_share"] for role in u.roles},
    }


def compare_topologies(
    q: SizingQuestion,
    aggregated_usd_per_month: float | None,
    workers: int,
    ray_address: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> TopologyComparison:
    """Every unit of `search.disaggregated`, sized for the demand, in waves by cost floor: a unit whose floor (the
    units its throughput bound needs, priced) is not below the cheapest deployment found so far (the aggregated
    recommendation's `aggregated_usd_per_month`, or a unit of an earlier wave) cannot win and is not simulated,
    as the aggregated search prunes its candidates (planner/sizing/search.py)."""
    start = time.perf_counter()
    units, pruned = enumerate_units(q)
    d = q.search.demand
    shape = workload_shape(q)
    tpot_bound = tightest(q.scenario.slo.tpot_ms)
    tasks, floors = [], {}
    for u in units:
        bound = unit_bound(u, shape, tpot_bound, q.scenario.slo, d.kind)
        guess = bound / 2 if bound else d.value
        tasks.append(UnitTask(u, d, q.search.probe, max(1.0, round(guess)) if d.kind == "users" else guess, bound))
        floors[u.index] = _cost_floor(q, u, bound)
    pending = sorted(tasks, key=lambda t: (floors[t.unit.index] is None, floors[t.unit.index] or 0, t.unit.index))
    best = aggregated_usd_per_month
    priced: dict[int, UnitResult] = {}
    wave_size = max(workers, WAVE_SIZE)
    with Executor(evaluate_unit, workers, ray_address) as submit:
        while pending:
            wave = []
            while pending and len(wave) < wave_size:
                task = pending.pop(0)
                floor = floors[task.unit.index]
                if best is not None and floor is not None and floor >= best:
                    why = f"cannot win: its cost floor {_usd(floor)} a month is not below the cheapest found, {_usd(best)}"
                    pruned.append((task.unit.label, why))
                    continue
                wave.append(task)
            futures = [(task, submit(task)) for task in wave]
            for task, future in futures:
                r = priced[task.unit.index] = _priced(q, task.unit, future.result())
                if progress is not None:
                    progress(len(priced), len(tasks))
                if r.meets and r.objective_usd_per_month is not None:
                    best = r.objective_usd_per_month if best is None else min(best, r.objective_usd_per_month)
    results = [priced[u.index] for u in units if u.index in priced]
    meeting = [r for r in results if r.meets and r.objective_usd_per_month is not None]
    best_unit = min(meeting, key=lambda r: (r.objective_usd_per_month, r.unit.index), default=None)
    sims = sum(len(r.evaluation.capacity.probes) + (r.evaluation.at_demand is not None) * 2 for r in results)
    kinds = frozenset(
        kind for kind, asked in (("disaggregated", q.search.disaggregated), ("length-routed", q.search.length_routed))
        if asked is not None
    )  # fmt: skip
    return TopologyComparison(results, pruned, best_unit, sims, time.perf_counter() - start, kinds)


WAVE_SIZE = 4  # units simulated between two pruning decisions (at least the workers)


def unit_bound(u: Unit, shape: Shape, tpot_bound_ms: float | None, slo, kind: str) -> float | None:
    """A load no steady state of the unit passes: the least, over its pools, of a pool's replicas' analytic
    throughput bound (planner/sizing/bound.py) over the share of the load it gets. A prefill/decode unit's pools
    each price their own part of every request: the prompt (and one sampled token) on a prefill replica; the reply
    on a decode replica, whose prompt is pulled (its KV-fit batch taken at a one-token context, which only raises
    the bound). A length-routed unit's pools get their side of the threshold's requests (u.role_shapes). Users: by
    Little's law, as a replica's."""
    per_role = []
    for pool in u.scenario.fleet.pools:
        share, pool_shape = 1.0, shape
        if pool.role == "prefill":
            pool_shape = dataclasses.replace(shape, output_tokens=1.0)
        elif pool.role == "decode":
            pool_shape = dataclasses.replace(shape, prompt_tokens=1.0, cacheable_prompt_tokens=0.0)
        else:  # length-routed
            share, pool_shape = u.role_shapes[pool.name]
            if share == 0:  # no request of the workload goes there: it bounds nothing
                continue
        bound = None if pool.role == "prefill" else tpot_bound_ms
        a = analyse(u.facts[pool.name], u.coefficients[pool.name], pool_shape, bound)
        per_role.append(a.rate_bound * pool.hardware.replicas / share)
    rate = min(per_role)
    if kind == "rate":
        return rate
    e2e = e2e_bound_ms(slo, shape)
    return None if e2e is None else rate * (e2e / 1e3 + shape.think_time_s)


def _cost_floor(q: SizingQuestion, u: Unit, bound: float | None) -> float | None:
    """The objective's monthly cost of the fewest units the bound allows (None: no bound, or no price)."""
    if bound is None or bound <= 0:
        return None
    return _monthly(q, u, replicas_needed(q.search.demand, bound, None))[2]


def _usd(v: float) -> str:
    return f"${v:,.0f}"


def _priced(q: SizingQuestion, u: Unit, ev: UnitEvaluation) -> UnitResult:
    return UnitResult(u, ev, *_monthly(q, u, ev.units))


def _monthly(q: SizingQuestion, u: Unit, units: int | None) -> tuple[float | None, float | None, float | None]:
    """(rent, buy, the objective's) a month for `units` units: each role's GPUs priced as planner/sizing/money.py
    prices a candidate's (rented, or bought and powered)."""
    money = q.search.money
    if units is None:
        return None, None, None
    per_role = [costs(prices(u.gpus[role], money), money, units * u.num_gpus(role), 0.0) for role in u.roles]
    rent = _total([c.rental_usd_per_month for c in per_role])
    buy = _total([c.purchase_usd_per_month for c in per_role])
    return rent, buy, buy if money.objective == "purchase" else rent


def _total(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(values)
