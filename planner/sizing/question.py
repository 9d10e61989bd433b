"""The sizing question as validated data: what must be served (Demand), the candidates to try (SearchSpec), what
counts as cost (Money) and how hard to look (Probe). planner/sizing/spec.py builds them from a sizing file; the
search, the checks and the report read them."""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.config import GpuSpec, KvTransferConfig, Scenario


@dataclass(frozen=True)
class Demand:
    """What the deployment must serve: an open-loop request rate or a number of concurrent users."""

    kind: str  # "rate" (requests/s) | "users" (closed loop)
    value: float
    headroom: float  # size for value x headroom
    source: str  # where the figure came from, for the report

    @property
    def unit(self) -> str:
        return "req/s" if self.kind == "rate" else "users"


@dataclass(frozen=True)
class Money:
    objective: str
    rental_usd_per_gpu_hour: dict[str, float]  # overrides of the catalog, by GPU name
    purchase_usd_per_gpu: dict[str, float]
    power_usd_per_kwh: float
    power_utilization: float  # average draw as a fraction of TDP
    amortization_months: float
    hours_per_month: float
    # Host memory for a KV tier (engine.kv_offload), per GiB: rented per hour, bought once. 0 by default: a cloud
    # GPU instance's RAM comes with its GPUs, and a server's DIMMs are in the price of the node the catalog omits
    host_memory_usd_per_gib_hour: float = 0.0
    host_memory_usd_per_gib: float = 0.0


@dataclass(frozen=True)
class Probe:
    num_requests: int  # per simulation
    max_probes: int  # simulations per candidate's capacity search (the run at the demand not counted)
    tolerance: float  # stop when the bracket hi/lo is within 1 + tolerance


@dataclass(frozen=True)
class PoolSettings:
    """One combination of a role's swept engine settings (`search.disaggregated.ROLE.engine`)."""

    settings: tuple[tuple[str, object], ...]  # field -> value, as the scenario reads it (for labels)
    raw: dict = field(hash=False, compare=False)  # as written: the unit's pool gets them as its `engine` keys


NO_SETTINGS = PoolSettings((), {})


@dataclass(frozen=True)
class Disaggregated:
    """Prefill/decode units to weigh against the aggregated candidates (`search.disaggregated`): every unit of
    `prefill` replicas of a prefill GPU and tensor parallel size and `decode` replicas of a decode one, behind
    one proxy, its KV pulled over `kv_transfer` (planner/sizing/topology.py)."""

    prefill_gpus: tuple[GpuSpec, ...]
    prefill_tensor_parallel_sizes: tuple[int, ...]
    decode_gpus: tuple[GpuSpec, ...]
    decode_tensor_parallel_sizes: tuple[int, ...]
    ratios: tuple[tuple[int, int], ...]  # (prefill replicas, decode replicas) of one unit: xPyD
    kv_transfer: KvTransferConfig
    kv_transfer_raw: dict = field(repr=False, hash=False, compare=False)  # as written: a unit's fleet gets it
    # each role's engine settings to sweep, one PoolSettings per combination (NO_SETTINGS: the scenario's engine)
    prefill_engines: tuple[PoolSettings, ...] = (NO_SETTINGS,)
    decode_engines: tuple[PoolSettings, ...] = (NO_SETTINGS,)


@dataclass(frozen=True)
class LengthRouted:
    """Length-routed units to weigh against the aggregated candidates (`search.length_routed`): every unit of `short`
    replicas that serve prompts up to a threshold and `long` replicas that serve the rest, behind one router
    (planner/sizing/topology.py)."""

    short_gpus: tuple[GpuSpec, ...]
    short_tensor_parallel_sizes: tuple[int, ...]
    short_engines: tuple[PoolSettings, ...]
    long_gpus: tuple[GpuSpec, ...]
    long_tensor_parallel_sizes: tuple[int, ...]
    long_engines: tuple[PoolSettings, ...]
    thresholds_tokens: tuple[int, ...]
    ratios: tuple[tuple[int, int], ...]  # (short replicas, long replicas) of one unit


@dataclass(frozen=True)
class SearchSpec:
    demand: Demand
    gpus: tuple[GpuSpec, ...]
    gpus_given: bool  # named by the user (a missing price is then an error, not a pruned candidate)
    tensor_parallel_sizes: tuple[int, ...]
    replicas: tuple[int, ...] | None  # None: as many as needed
    dtypes: tuple[str, ...]
    engine: dict[str, tuple]  # EngineConfig field -> values to sweep
    money: Money
    probe: Probe
    # Data-parallel ranks per replica (vLLM's --data-parallel-size) and expert parallel on or off: the layouts a
    # mixture of experts is served in (planner/sizing/candidates.py builds each as one replica's scenario)
    data_parallel_sizes: tuple[int, ...] = (1,)
    expert_parallel: tuple[bool, ...] = (False,)
    bound_pruning: bool = True
    disaggregated: Disaggregated | None = None  # None: aggregated candidates only
    length_routed: LengthRouted | None = None  # None: no length-routed units


@dataclass(frozen=True)
class SizingQuestion:
    scenario: Scenario  # the base: model, workload shape, SLOs
    search: SearchSpec
    source: str
    # A probe's requests that the scenario's own max_model_len keeps, and how many of those it truncates.
    probe_requests: tuple[int, int]
    raw: dict = field(repr=False, hash=False)
