"""A sizing file -> (the validated scenario, the validated `search:` section).

A sizing file is a scenario plus a `search:` section. The scenario part goes through the scenario loader
unchanged (`planner.scenario.load.validate_mapping`); the search part is checked here with the same messages
(`ScenarioError`: file, dotted key, bad value, what is allowed). Engine values to sweep are checked by the
scenario's own rules for those fields (`planner.scenario.validation`), so a sweep accepts exactly what a scenario does.
Every key has a default: a plain scenario is a sizing question over the GPU catalog.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.load import read_overridden, validate_mapping
from planner.scenario.rules import (
    MAX_NUM_REQUESTS,
    RULES,
    Ctx,
    did_you_mean,
    in_range,
)
from planner.scenario.validation import _convert, _convert_scalar, allowed_keys
from planner.sizing.question import Demand, Probe, SearchSpec, SizingQuestion
from planner.sizing.spec_checks import (
    check_num_candidates,
    check_pool_override,
    check_requests_fit,
    check_users_have_a_wait_bound,
)
from planner.sizing.spec_disaggregated import parse_disaggregated
from planner.sizing.spec_fields import gpu_list, int_list, mapping, one_of, scalar, section
from planner.sizing.spec_length_routed import parse_length_routed
from planner.sizing.spec_money import check_prices, parse_money
from sim.config import HOST_DEVICES, ArrivalConfig, EngineConfig, GpuSpec, HardwareConfig, Scenario

# Weight dtypes the memory and cost models price: the scenario's dtype rule. fp8/int8/int4 weights would need
# a quantised-GEMM cost and scale tensors in the memory model; refused rather than priced as bf16.
WEIGHT_DTYPES = RULES[(Scenario, "dtype")].choices
DEFAULT_TENSOR_PARALLEL = (1, 2, 4, 8)
# A candidate's tensor parallel size and replica count: the scenario's own limits on the same quantities.
TENSOR_PARALLEL_RULE = RULES[(HardwareConfig, "tensor_parallel_size")]
REPLICAS_RULE = RULES[(HardwareConfig, "replicas")]
DATA_PARALLEL_RULE = RULES[(HardwareConfig, "data_parallel_size")]
# A probe's requests: at least enough for a p99 to mean something, at most a scenario's run.
PROBE_REQUESTS = in_range(20, MAX_NUM_REQUESTS)
# Probes per capacity search: doubling from the first guess down to its floor (1/64 of it) or up to the
# analytic bound takes a handful, and bisecting a 2x bracket to a tolerance of 1e-6 about 20 more; a larger
# budget only lets a search that cannot converge run on (a closed loop without a latency bound doubles its
# users after each passing probe).
PROBES = in_range(2, 64)


SEARCH_KEYS = ("demand", "candidates", "money", "probe", "disaggregated", "length_routed")
DEMAND_KEYS = ("rate", "concurrency", "headroom")
CANDIDATE_KEYS = (
    "gpus",
    "tensor_parallel_sizes",
    "data_parallel_sizes",
    "expert_parallel",
    "replicas",
    "dtypes",
    "engine",
    "bound_pruning",
)
PROBE_KEYS = ("num_requests", "max_probes", "tolerance")
# Engine fields a sweep may not set: the pool override would make every candidate's memory model moot.
NOT_SWEPT = ("num_gpu_blocks_override",)


def load_sizing(path: str | Path, overrides: Sequence[str] = ()) -> SizingQuestion:
    """Read and validate a sizing file (a scenario, with or without `search:`). Raises PlannerError."""
    path = Path(path)
    data = read_overridden(path, overrides, "sizing file", "a sizing file is a scenario (model, hardware.gpu) + search")
    if not isinstance(data, dict):
        raise ScenarioError(str(path), "top level", data, "must be a mapping (a scenario with a search section)")
    search_raw = data.pop("search", None)
    scenario_keys = allowed_keys(Scenario)
    for key in data:  # the scenario loader would not think of `search` when it names the allowed keys
        if str(key) not in scenario_keys.split(", ") and did_you_mean(str(key), ["search"]):
            raise ScenarioError(
                str(path), str(key), NO_VALUE, f"unknown key (did you mean search?); allowed: {scenario_keys}, search"
            )
    scenario = validate_mapping(data, str(path), path.absolute().parent)
    if scenario.fleet is not None:
        raise ScenarioError(
            str(path), "fleet", NO_VALUE,
            "planner size searches one pool of identical replicas, and prefill/decode units with a"
            " search.disaggregated section (planner/sizing/topology.py); give hardware instead of fleet (a fleet"
            " of several mixed pools is not searched: simulate it with planner simulate)",
        )  # fmt: skip
    ctx = Ctx(str(path), path.absolute().parent)
    search = parse_search({} if search_raw is None else search_raw, scenario, ctx)
    check_pool_override(scenario, search, ctx)
    probe_requests = check_requests_fit(scenario, search.probe, ctx)
    return SizingQuestion(scenario, search, str(path), probe_requests, data)


def parse_search(raw: Any, scenario: Scenario, ctx: Ctx) -> SearchSpec:
    s = mapping(raw, "search", SEARCH_KEYS, ctx)
    cands = mapping(section(s, "candidates"), "search.candidates", CANDIDATE_KEYS, ctx)
    gpus, given = _gpus(cands.get("gpus"), scenario, ctx)
    money = parse_money(section(s, "money"), ctx)
    disaggregated = parse_disaggregated(s.get("disaggregated"), scenario, TENSOR_PARALLEL_RULE, ctx, _engine)
    length_routed = parse_length_routed(s.get("length_routed"), scenario, TENSOR_PARALLEL_RULE, ctx, _engine)
    check_prices(gpus, given, money, ctx, disaggregated, length_routed)
    spec = SearchSpec(
        demand=_demand(section(s, "demand"), scenario, ctx),
        gpus=gpus,
        gpus_given=given,
        tensor_parallel_sizes=int_list(
            cands.get("tensor_parallel_sizes", list(DEFAULT_TENSOR_PARALLEL)),
            "search.candidates.tensor_parallel_sizes",
            TENSOR_PARALLEL_RULE,
            ctx,
        ),
        replicas=_replicas(cands.get("replicas", "as_needed"), ctx),
        data_parallel_sizes=int_list(
            cands.get("data_parallel_sizes", [scenario.hardware.data_parallel_size]),
            "search.candidates.data_parallel_sizes",
            DATA_PARALLEL_RULE,
            ctx,
        ),
        expert_parallel=_expert_parallel(cands.get("expert_parallel", [scenario.hardware.expert_parallel]), ctx),
        dtypes=_dtypes(cands.get("dtypes", [scenario.dtype]), ctx),
        engine=_engine(section(cands, "engine"), scenario, ctx),
        money=money,
        probe=_probe(section(s, "probe"), ctx),
        bound_pruning=scalar(cands, "bound_pruning", bool, True, "search.candidates", ctx, lambda v: True, ""),
        disaggregated=disaggregated,
        length_routed=length_routed,
    )
    check_num_candidates(spec, ctx)
    check_users_have_a_wait_bound(spec.demand, scenario, ctx)
    return spec


# ---------------------------------------------------------------------------------------------------------
# Sections


MAX_HEADROOM = 100.0  # spare capacity to size for: 100x the demand is another demand, to give as such


def _demand(raw: Any, scenario: Scenario, ctx: Ctx) -> Demand:
    d = mapping(raw, "search.demand", DEMAND_KEYS, ctx)
    where = "search.demand"
    headroom = scalar(
        d, "headroom", float, 1.2, where, ctx, lambda v: 1 <= v <= MAX_HEADROOM,
        f"must be in [1, {MAX_HEADROOM:g}] (1.2 = 20% spare)",
    )  # fmt: skip
    if "rate" in d and "concurrency" in d:
        raise ScenarioError(ctx.file, f"{where}.concurrency", d["concurrency"], "give rate or concurrency, not both")
    # The scenario's own ranges (planner.scenario.rules): the probes run scenarios at up to the sized demand.
    rate_rule, users_rule = RULES[(ArrivalConfig, "rate")], RULES[(ArrivalConfig, "concurrency")]
    if "rate" in d:
        rate = scalar(d, "rate", float, None, where, ctx, rate_rule.ok, rate_rule.allowed)
        demand = Demand("rate", rate, headroom, f"{where}.rate")
    elif "concurrency" in d:
        if scenario.workload.sessions is not None:
            raise ScenarioError(
                ctx.file, f"{where}.concurrency", d["concurrency"],
                "a sessions workload's load is the rate its sessions start at (workload.sessions.rate), not users"
                " at once; give search.demand.rate, in requests/s",
            )  # fmt: skip
        users = scalar(d, "concurrency", int, None, where, ctx, users_rule.ok, users_rule.allowed + " users")
        demand = Demand("users", users, headroom, f"{where}.concurrency")
    else:
        demand = _demand_from_workload(scenario, headroom, ctx)
    rule = rate_rule if demand.kind == "rate" else users_rule
    if not rule.ok(demand.value * headroom):
        raise ScenarioError(
            ctx.file, f"{where}.headroom", headroom,
            f"sizes for {demand.value * headroom:,.6g} {demand.unit} ({demand.value:,.6g} from {demand.source}), and"
            f" a scenario's {'workload.arrival.rate' if demand.kind == 'rate' else 'workload.arrival.concurrency'}"
            f" {rule.allowed}",
        )  # fmt: skip
    return demand


def _demand_from_workload(scenario: Scenario, headroom: float, ctx: Ctx) -> Demand:
    """No demand given: the scenario's own load (its rate, its users, or its trace's mean rate)."""
    a = scenario.workload.arrival
    if scenario.workload.sessions is not None:
        from planner.sizing.probe import sessions_request_rate

        steady = dataclasses.replace(scenario.workload.sessions, start="steady")  # as the probes run them
        rate = sessions_request_rate(dataclasses.replace(scenario.workload, sessions=steady), scenario.max_model_len)
        source = (
            f"the mean rate of the sessions' first {scenario.workload.num_requests:,} turns, sessions under way"
            " (workload.sessions)"
        )
        return Demand("rate", rate, headroom, source)
    if a.process == "closed":
        return Demand("users", a.concurrency, headroom, "workload.arrival.concurrency")
    if a.rate is not None:
        return Demand("rate", a.rate, headroom, "workload.arrival.rate")
    from sim.workload import generate_workload  # a trace's recorded arrivals: their mean rate

    wl = generate_workload(scenario.workload, scenario.max_model_len)
    span_s = float(wl.arrival_s[-1]) if len(wl) > 1 else 0.0
    if span_s <= 0:
        raise ScenarioError(
            ctx.file, "search.demand", NO_VALUE, "missing, and the trace has no arrival span; give rate"
        )
    source = f"the mean rate of the trace's first {len(wl):,} requests ({scenario.workload.trace.path})"
    return Demand("rate", (len(wl) - 1) / span_s, headroom, source)


def _expert_parallel(raw: Any, ctx: Ctx) -> tuple[bool, ...]:
    """Expert parallel off, on, or both to compare (vLLM's --enable-expert-parallel)."""
    key = "search.candidates.expert_parallel"
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise ScenarioError(ctx.file, key, raw, "is empty: give true, false or [false, true]")
    for i, v in enumerate(values):
        if not isinstance(v, bool):
            raise ScenarioError(ctx.file, f"{key}[{i}]" if isinstance(raw, list) else key, v, "expected true or false")
    return tuple(dict.fromkeys(values))


def _gpus(raw: Any, scenario: Scenario, ctx: Ctx) -> tuple[tuple[GpuSpec, ...], bool]:
    key = "search.candidates.gpus"
    if raw is None:
        from planner.catalog import load_gpu_catalog

        # the catalog's host-CPU entry is not something to buy for serving
        return tuple(g for name, g in load_gpu_catalog().items() if name not in HOST_DEVICES), False
    gpus = gpu_list(raw, key, ctx, "name at least one GPU (or leave the key out: the catalog)")
    return gpus, True


def _engine(raw: Any, scenario: Scenario, ctx: Ctx, where: str = "search.candidates.engine") -> dict[str, tuple]:
    """Engine field -> the values to sweep, each checked by the scenario's rule for that field."""
    names = [f.name for f in dataclasses.fields(EngineConfig) if f.name not in NOT_SWEPT]
    e = mapping(raw, where, tuple(names), ctx)
    hints = typing.get_type_hints(EngineConfig)
    sweep = {}
    for name in names:
        if name not in e:
            continue
        values = e[name] if isinstance(e[name], list) else [e[name]]
        if not values:
            raise ScenarioError(ctx.file, f"{where}.{name}", e[name], "is empty: give at least one value")
        hint = hints[name]
        # vLLM's --speculative-config mappings, or a host KV tier's; null: off (each read as the scenario's)
        if name in ("speculative", "kv_offload"):
            converted = (
                _convert(EngineConfig, name, hint, v, f"{where}.{name}[{i}]", ctx) for i, v in enumerate(values)
            )
            sweep[name] = tuple(dict.fromkeys(converted))
            continue
        if typing.get_origin(hint) is not None:  # `int | None`: a sweep takes the value itself
            hint = next(a for a in typing.get_args(hint) if a is not type(None))
        converted = (
            _convert_scalar(EngineConfig, name, hint, v, f"{where}.{name}[{i}]", ctx) for i, v in enumerate(values)
        )
        sweep[name] = tuple(dict.fromkeys(converted))  # a value given twice is one candidate, searched once
    return sweep


def _dtypes(raw: Any, ctx: Ctx) -> tuple[str, ...]:
    key = "search.candidates.dtypes"
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise ScenarioError(ctx.file, key, raw, "is empty: give at least one weight dtype")
    for i, v in enumerate(values):
        if v not in WEIGHT_DTYPES:
            hint = did_you_mean(str(v), WEIGHT_DTYPES)
            raise ScenarioError(
                ctx.file, f"{key}[{i}]", v,
                f"{one_of(WEIGHT_DTYPES)}{hint}; fp8/int8/int4 weights are not priced by the memory and cost"
                " models yet (the KV cache can be fp8: candidates.engine.kv_cache_dtype)",
            )  # fmt: skip
    return tuple(dict.fromkeys(values))


def _replicas(raw: Any, ctx: Ctx) -> tuple[int, ...] | None:
    if raw == "as_needed":
        return None
    if isinstance(raw, str):
        raise ScenarioError(
            ctx.file,
            "search.candidates.replicas",
            raw,
            "must be as_needed or a list of replica counts" + did_you_mean(raw, ["as_needed"]),
        )
    return int_list(raw, "search.candidates.replicas", REPLICAS_RULE, ctx)


def _probe(raw: Any, ctx: Ctx) -> Probe:
    p = mapping(raw, "search.probe", PROBE_KEYS, ctx)
    w = "search.probe"
    return Probe(
        num_requests=scalar(p, "num_requests", int, 1000, w, ctx, PROBE_REQUESTS.ok, PROBE_REQUESTS.allowed),
        max_probes=scalar(p, "max_probes", int, 8, w, ctx, PROBES.ok, PROBES.allowed),
        tolerance=scalar(p, "tolerance", float, 0.1, w, ctx, lambda v: 0 < v < 1, "must be in (0, 1)"),
    )
