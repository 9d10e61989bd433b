"""Every combination of the search's GPUs, tensor parallel sizes, data-parallel layouts (ranks, expert parallel),
weight dtypes and engine settings, as one replica's scenario each, and the reasons those that cannot run were
pruned: the scenario's own rules (tensor parallel not dividing the heads, a token budget below max_num_seqs, a
data-parallel group not filling its nodes...), the memory model (weights and activations do not fit), a tensor
parallel size on a GPU without an interconnect, a swept max_model_len that every request of a probe is longer
than, a missing price."""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from pathlib import Path

from planner.errors import ScenarioError
from planner.scenario.cross_checks import check_relations
from planner.scenario.data_parallel import GPU_TOPOLOGY_KEYS, GROUP_ENGINE_KEYS, TOPOLOGY_KEYS
from planner.scenario.rules import Ctx
from planner.sizing.coefficients import resolve_coefficients
from planner.sizing.question import SearchSpec, SizingQuestion
from planner.sizing.spec_checks import probe_request_counts
from sim.config import EngineConfig, GpuSpec, HardwareConfig, Scenario
from sim.cost_coefficients import CostCoefficients
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
    "all2all_backend": "a2a",
    "kv_offload": "host tier",
    "enable_eplb": "eplb",
    "enable_dbo": "dbo",
}


@dataclass(frozen=True)
class Candidate:
    index: int
    label: str
    gpu: GpuSpec
    tensor_parallel_size: int
    data_parallel_size: int  # ranks of tensor_parallel_size GPUs in one replica (vLLM's --data-parallel-size)
    expert_parallel: bool
    dtype: str
    settings: tuple[tuple[str, object], ...]  # the swept engine values of this candidate
    scenario: Scenario  # one replica
    facts: EngineFacts  # the replica's engine, derived once: every analysis and probe of the candidate reads these
    coefficients: CostCoefficients
    provenance: str  # what the figures rest on (coefficients.resolve_coefficients): its label
    provenance_kind: str  # calibrated | transferred | spec-sheet
    uncertainty: dict[str, float]  # coefficient -> std, what `--intervals` draws from (empty: none known)

    @property
    def num_gpus(self) -> int:
        """The GPUs of one replica: its data-parallel ranks' tensor-parallel groups."""
        return self.tensor_parallel_size * self.data_parallel_size

    @property
    def host_memory_gib(self) -> float:
        """The replica's host memory for its KV tier (engine.kv_offload: size_gib per GPU); 0 without one."""
        offload = self.scenario.engine.kv_offload
        return 0.0 if offload is None else offload.size_gib * self.num_gpus

    @property
    def layout(self) -> tuple[str, int, int, bool]:
        """GPU, tensor parallel, data parallel, expert parallel: candidates alike but for engine settings."""
        return self.gpu.name, self.tensor_parallel_size, self.data_parallel_size, self.expert_parallel


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
    combos = itertools.product(
        s.gpus, s.tensor_parallel_sizes, s.data_parallel_sizes, s.expert_parallel, s.dtypes,
        *(s.engine[n] for n in sweep_names),
    )  # fmt: skip
    seen: set[tuple] = set()
    for gpu, tp, dp, ep, dtype, *values in combos:
        ep = ep and tp * dp > 1  # vLLM ignores --enable-expert-parallel on one GPU
        settings = tuple(zip(sweep_names, values))
        if not (dp > 1 and ep):  # the all-to-all and EPLB are a group's settings: swept, they make no other candidate
            settings = tuple((n, v) for n, v in settings if n not in GROUP_ENGINE_KEYS)
        if (key := (gpu.name, tp, dp, ep, dtype, settings)) in seen:
            continue
        seen.add(key)
        label = candidate_label(gpu.name, tp, dtype, settings, q.scenario.dtype, len(s.dtypes) > 1, dp, ep)
        scenario, facts, reason = _build(q, gpu, (tp, dp, ep), dtype, dict(settings))
        if reason is None:
            reason = _requests_problem(q, scenario.max_model_len, request_counts) or _price_problem(s, gpu)
        if reason is not None:
            pruned.append(Pruned(label, gpu.name, tp, reason))
            continue
        coefficients, prov = resolve_coefficients(scenario)
        kept.append(
            Candidate(
                len(kept), label, gpu, tp, dp, ep, dtype, settings, scenario, facts, coefficients, prov.label,
                prov.kind, dict(prov.uncertainty),
            )
        )  # fmt: skip
    return kept, pruned


def candidate_label(
    gpu: str, tp: int, dtype: str, settings, base_dtype: str, show_dtype: bool, dp: int = 1, ep: bool = False
) -> str:
    parts = [f"{gpu} tp{tp}" + (f" dp{dp}" if dp > 1 else "") + (" ep" if ep else "")]
    if show_dtype or dtype != base_dtype:
        parts.append(dtype)
    return ", ".join([*parts, *settings_words(settings)])


def settings_words(settings) -> list[str]:
    """Swept engine settings as a label says them: 'seqs 256', 'chunked on', 'spec eagle3 k=3'."""
    words = []
    for name, value in settings:
        short = LABELS.get(name, name)
        if name == "speculative":  # off, or the method and k (the rest is the scenario's, printed by the serve line)
            value = "off" if value is None else f"{value.method} k={value.num_speculative_tokens}"
        if name == "kv_offload":  # off, or the host memory per GPU (its link is the scenario's, in the serve line)
            value = "off" if value is None else f"{value.size_gib:g} GiB"
        words.append(f"{short} {'on' if value is True else 'off' if value is False else value}")
    return words


def _build(
    q: SizingQuestion, gpu: GpuSpec, layout: tuple[int, int, bool], dtype: str, settings: dict
) -> tuple[Scenario | None, EngineFacts | None, str | None]:
    """One replica's scenario and its engine's facts through the scenario's own relation checks and the memory
    model; or why not. `layout`: tensor parallel, data parallel, expert parallel."""
    base = q.scenario
    tp, dp, ep = layout
    raw_engine = dict(q.raw.get("engine") or {}) | settings
    engine = dataclasses.replace(base.engine, **settings)
    if "max_num_batched_tokens" not in raw_engine:  # the default for this candidate's chunked-prefill setting
        engine = dataclasses.replace(engine, max_num_batched_tokens=EngineConfig().max_num_batched_tokens)
    hardware, raw_hardware, reason = group_hardware(base.hardware, dict(q.raw.get("hardware") or {}), gpu, layout)
    if reason is not None:
        return None, None, reason
    if not (dp > 1 and ep):  # the all-to-all and EPLB settings are the group's: another layout runs without them
        engine = dataclasses.replace(engine, **{k: getattr(EngineConfig(), k) for k in GROUP_ENGINE_KEYS})
        raw_engine = {k: v for k, v in raw_engine.items() if k not in GROUP_ENGINE_KEYS}
    scenario = dataclasses.replace(base, dtype=dtype, hardware=hardware, engine=engine)
    raw = {**q.raw, "hardware": raw_hardware, "engine": raw_engine}
    try:
        scenario = check_relations(scenario, raw, Ctx(q.source, Path(q.source).parent))
    except ScenarioError as e:
        return None, None, str(e).removeprefix(f"{q.source}: ")
    if tp > 1 and not gpu.interconnect_bandwidth_gbps:
        return None, None, f"tensor parallel {tp} needs the GPU's interconnect_bandwidth_gbps, which {gpu.name} lacks"
    facts = EngineFacts.of(scenario)
    problems = fit_problems(facts, memory_breakdown(facts))
    if problems:
        return None, None, "does not fit: " + "; ".join(problems)
    return scenario, facts, None


def group_hardware(
    base: HardwareConfig, raw_hardware: dict, gpu: GpuSpec, layout: tuple[int, int, bool]
) -> tuple[HardwareConfig, dict, str | None]:
    """One replica's hardware for a layout, the hardware keys as the scenario checks should read them, and why the
    layout cannot run (None: it can). A data-parallel group fills whole nodes of the GPU's catalog node (or the
    scenario's gpus_per_node); the scenario's network and NVLink domain apply to every group; the router, which
    a group replaces with vLLM's DP balancer, and the data-parallel keys apply only to groups."""
    tp, dp, ep = layout
    # vLLM ignores --enable-expert-parallel on one GPU; the scenario check refuses it there
    hardware = HardwareConfig(gpu, tp, 1, base.router, ep and tp * dp > 1)
    given = {k: raw_hardware[k] for k in GPU_TOPOLOGY_KEYS if k in raw_hardware}  # the user's cluster, as written
    raw_hardware = {k: v for k, v in raw_hardware.items() if k not in ("data_parallel_size", *TOPOLOGY_KEYS)}
    if dp == 1:
        return hardware, raw_hardware, None
    raw_hardware.pop("router", None)
    per_node = given.get("gpus_per_node") or gpu.gpus_per_node
    gpus = tp * dp
    nodes = 1 if per_node is None or gpus <= per_node else gpus // per_node
    if per_node is not None and gpus > per_node and gpus % per_node:
        return (
            hardware,
            raw_hardware,
            (
                f"data parallel {dp} x tensor parallel {tp} = {gpus} GPUs do not fill whole nodes of {per_node}"
                f" {gpu.name} GPUs (vLLM runs the same number of ranks on every node)"
            ),
        )
    domain = given.get("nvlink_domain_gpus")  # a rack's domain holds a smaller group whole
    hardware = dataclasses.replace(
        hardware,
        router=HardwareConfig.router,
        data_parallel_size=dp,
        num_nodes=nodes,
        gpus_per_node=given.get("gpus_per_node"),
        nvlink_domain_gpus=None if domain is None else min(domain, nodes * (per_node or gpus)),
        internode_gbit_per_s=given.get("internode_gbit_per_s"),
    )
    return hardware, raw_hardware, None


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
