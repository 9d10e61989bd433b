"""Every combination of the search's GPUs, tensor parallel sizes, weight dtypes and engine settings, as one
replica's scenario each, and the reasons those that cannot run were pruned: the scenario's own rules
(tensor parallel not dividing the heads, a token budget below max_num_seqs...), the memory model (weights
and activations do not fit), a tensor parallel size on a GPU without an interconnect, a swept max_model_len
that every request of a probe is longer than, a missing price."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from planner.errors import ScenarioError
from planner.scenario.cross_checks import check_relations
from planner.scenario.rules import Ctx
from planner.sizing.coefficients import resolve_coefficients
from planner.sizing.question import SearchSpec, SizingQuestion
from planner.sizing.spec_checks import probe_request_counts
from sim.config import EngineConfig, GpuSpec, HardwareConfig, Scenario
from sim.cost_model import CostCoefficients
from sim.engine_facts import EngineFacts
from sim.memory import memory_breakdown
from sim.memory_fit import fit_problems

# Short names for the settings in a candidate's label.
LABELS = {
    "max_num_seqs": "seqs",
    "max_num_batched_tokens": "tokens",
    "enable_chunked_prefill": "chunked",
    "enable_prefix_caching": "prefix-cache",
    "kv_cache_dtype": "kv",
    "gpu_memory_utilization": "mem",
    "block_size": "block",
    "max_model_len": "len",
    "scheduler": "sched",
    "kv_cache": "kv-layout",
    "speculative": "spec",
}


@dataclass(frozen=True)
class Candidate:
    index: int
    label: str
    gpu: GpuSpec
    tensor_parallel_size: int
    dtype: str
    settings: tuple[tuple[str, object], ...]  # the swept engine values of this candidate
    scenario: Scenario  # one replica
    facts: EngineFacts  # the replica's engine, derived once: every analysis and probe of the candidate reads these
    coefficients: CostCoefficients
    provenance: str  # what the figures rest on (coefficients.resolve_coefficients): its label
    provenance_kind: str  # calibrated | transferred | spec-sheet
    uncertainty: dict[str, float]  # coefficient -> std, what `--intervals` draws from (empty: none known)


@dataclass(frozen=True)
class Pruned:
    label: str
    gpu: str
    tensor_parallel_size: int
    reason: str


def enumerate_candidates(q: SizingQuestion) -> tuple[list[Candidate], list[Pruned]]:
    s = q.search
    sweep_names = list(s.engine)
    kept: list[Candidate] = []
    pruned: list[Pruned] = []
    # max_model_len -> a probe's requests it keeps, and truncates (the scenario's own: counted when it was loaded)
    request_counts = {q.scenario.max_model_len: q.probe_requests}
    combos = itertools.product(s.gpus, s.tensor_parallel_sizes, s.dtypes, *(s.engine[n] for n in sweep_names))
    for gpu, tp, dtype, *values in combos:
        settings = tuple(zip(sweep_names, values))
        label = candidate_label(gpu.name, tp, dtype, settings, q.scenario.dtype, len(s.dtypes) > 1)
        scenario, facts, reason = _build(q, gpu, tp, dtype, dict(settings))
        if reason is None:
            reason = _requests_problem(q, scenario.max_model_len, request_counts) or _price_problem(s, gpu)
        if reason is not None:
            pruned.append(Pruned(label, gpu.name, tp, reason))
            continue
        coefficients, prov = resolve_coefficients(scenario)
        kept.append(
            Candidate(
                len(kept), label, gpu, tp, dtype, settings, scenario, facts, coefficients, prov.label, prov.kind,
                dict(prov.uncertainty),
            )
        )  # fmt: skip
    return kept, pruned


def candidate_label(gpu: str, tp: int, dtype: str, settings, base_dtype: str, show_dtype: bool) -> str:
    parts = [f"{gpu} tp{tp}"]
    if show_dtype or dtype != base_dtype:
        parts.append(dtype)
    for name, value in settings:
        short = LABELS.get(name, name)
        if name == "speculative":  # off, or the method and k (the rest is the scenario's, printed by the serve line)
            value = "off" if value is None else f"{value.method} k={value.num_speculative_tokens}"
        parts.append(f"{short} {'on' if value is True else 'off' if value is False else value}")
    return ", ".join(parts)


def _build(
    q: SizingQuestion, gpu: GpuSpec, tp: int, dtype: str, settings: dict
) -> tuple[Scenario | None, EngineFacts | None, str | None]:
    """One replica's scenario and its engine's facts through the scenario's own relation checks and the memory
    model; or why not."""
    base = q.scenario
    raw_engine = dict(q.raw.get("engine") or {}) | settings
    engine = dataclasses.replace(base.engine, **settings)
    if "max_num_batched_tokens" not in raw_engine:  # the default for this candidate's chunked-prefill setting
        engine = dataclasses.replace(engine, max_num_batched_tokens=EngineConfig().max_num_batched_tokens)
    # The scenario's expert_parallel applies to the candidates of more than one GPU (vLLM ignores the flag on
    # one; the scenario check refuses it there, which would drop every 1-GPU candidate).
    hardware = HardwareConfig(gpu, tp, 1, base.hardware.router, base.hardware.expert_parallel and tp > 1)
    scenario = dataclasses.replace(base, dtype=dtype, hardware=hardware, engine=engine)
    try:
        scenario = check_relations(scenario, {**q.raw, "engine": raw_engine}, Ctx(q.source, Path(q.source).parent))
    except ScenarioError as e:
        return None, None, str(e).removeprefix(f"{q.source}: ")
    if tp > 1 and not gpu.interconnect_bandwidth_gbps:
        return None, None, f"tensor parallel {tp} needs the GPU's interconnect_bandwidth_gbps, which {gpu.name} lacks"
    facts = EngineFacts.of(scenario)
    problems = fit_problems(facts, memory_breakdown(facts))
    if problems:
        return None, None, "does not fit: " + "; ".join(problems)
    return scenario, facts, None


def _requests_problem(q: SizingQuestion, max_model_len: int, counts: dict[int, tuple[int, int]]) -> str | None:
    """A max_model_len (swept) that serves fewer of the workload's requests than the scenario's own: it rejects
    (or truncates) requests that the scenario's keeps whole, so its probes would run a lighter workload than
    the one asked about, and it could win by dropping the longest requests. `counts` caches a probe's (kept,
    truncated) per max_model_len: a sweep has many candidates per value."""
    if max_model_len not in counts:
        counts[max_model_len] = probe_request_counts(q.scenario, q.search.probe, max_model_len)
    (kept, truncated), (asked_kept, asked_truncated) = counts[max_model_len], q.probe_requests
    probe = f"a probe's {q.search.probe.num_requests:,} requests"
    asked = f"engine.max_model_len {q.scenario.max_model_len}"
    if kept < asked_kept:
        return (
            f"max_model_len {max_model_len} rejects {asked_kept - kept:,} of {probe} that {asked} keeps (prompt +"
            " output tokens longer): it does not serve this workload"
        )
    if truncated > asked_truncated:
        return (
            f"max_model_len {max_model_len} truncates {truncated - asked_truncated:,} more of {probe} than {asked}"
            " (prompt + output tokens longer): it does not serve this workload"
        )
    return None


def _price_problem(s: SearchSpec, gpu: GpuSpec) -> str | None:
    m = s.money
    if (
        m.objective in ("rental", "both")
        and gpu.rental_usd_per_hour is None
        and gpu.name not in m.rental_usd_per_gpu_hour
    ):
        return f"no rental price for {gpu.name} in the catalog (set search.money.rental_usd_per_gpu_hour)"
    if m.objective in ("purchase", "both") and gpu.purchase_usd is None and gpu.name not in m.purchase_usd_per_gpu:
        return f"no purchase price for {gpu.name} in the catalog (set search.money.purchase_usd_per_gpu)"
    if m.objective in ("purchase", "both") and gpu.tdp_w is None and m.power_usd_per_kwh > 0:
        return f"no tdp_w for {gpu.name}: the power bill of a purchase cannot be priced"
    return None
