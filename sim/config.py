"""The validated scenario as plain frozen dataclasses.

`planner.scenario.load` parses and validates the YAML into these; everything below `planner/` (the simulator,
the live engine) takes them as they are and never re-reads a file. Units are in the field names.

No `from __future__ import annotations` here, unlike everywhere else: validation reads these classes' type
hints (typing.get_type_hints), and as strings each would be compiled and evaluated again at every start-up.
Every class has a docstring, which also spares `dataclass` building one from the class's signature.
"""

from dataclasses import dataclass, field, replace

from sim.model_spec import ModelSpec

HOST_DEVICES = ("cpu",)  # catalog GPUs that are the host itself: no CUDA graphs, nothing overlaps
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator (or a CPU, for runs on this machine). Dense figures only, never sparse ones."""

    name: str
    memory_bytes: int  # total memory as the driver reports it (torch.cuda.mem_get_info()[1])
    bf16_tflops: float  # dense bf16/fp16 tensor-core peak
    memory_bandwidth_gbps: float  # GB/s (1e9 bytes/s)
    fp8_tflops: float | None = None  # dense fp8 tensor-core peak; None: no fp8 (fp8 weights run at dtype's rate)
    fp4_tflops: float | None = None  # dense FP4 tensor-core peak (NVFP4 / MXFP4); None: no FP4 tensor cores
    # Dense FP32 peak without tensor cores: what float32 matmuls run at, PyTorch's default float32 matmul
    # precision ("highest", which vLLM keeps: VLLM_FLOAT32_MATMUL_PRECISION) using no TF32. None: not given
    # (a float32 model on such a GPU is refused rather than priced from a guess).
    fp32_tflops: float | None = None
    interconnect_bandwidth_gbps: float | None = None  # GB/s per GPU, one direction (NVLink / xGMI / PCIe)
    tdp_w: float | None = None  # board power, W: the power bill of a bought GPU (planner size)
    rental_usd_per_hour: float | None = None  # $ per GPU-hour to rent it (planner size)
    purchase_usd: float | None = None  # $ to buy one (planner size)
    # The node it ships in, a data-parallel group's topology unless its hardware says otherwise (sim/moe_group.py):
    # GPUs per node (8 on an HGX board, 4 in a GB200 compute tray), GPUs per NVLink domain (8 on an HGX board, 72
    # in a GB200 NVL72 rack) and the network between domains, Gb/s per GPU, one direction. None: not given.
    gpus_per_node: int | None = None
    nvlink_domain_gpus: int | None = None
    internode_gbit_per_s: float | None = None


@dataclass(frozen=True)
class HardwareConfig:
    """The GPUs of a deployment: `replicas` engines of `tensor_parallel_size` GPUs each, or one data-parallel
    group of `data_parallel_size` such ranks (sim/data_parallel.py)."""

    gpu: GpuSpec  # a catalog GPU, or the figures of one
    tensor_parallel_size: int = 1  # GPUs per engine; must divide the attention heads (vLLM's rule)
    replicas: int = 1  # engine copies behind the router
    # round_robin | least_outstanding: requests dealt to the replicas in turn, or each to the one with the fewest
    # requests not yet finished
    router: str = "round_robin"
    # vLLM's --enable-expert-parallel: a mixture of experts' routed experts are placed whole on the
    # tensor-parallel ranks (each rank holds ceil or floor of num_experts / tp of them) instead of every expert
    # being split across all ranks; attention, dense MLPs and shared experts stay tensor parallel.
    expert_parallel: bool = False
    # vLLM's --data-parallel-size (sim/data_parallel.py): this many engine ranks of tensor_parallel_size GPUs each,
    # each with its own scheduler, batch and KV cache, stepping in lockstep behind vLLM's DP load balancer; with
    # expert_parallel the routed experts span all data_parallel_size x tensor_parallel_size GPUs.
    data_parallel_size: int = 1
    # Where the data-parallel ranks' GPUs sit (sim/moe_group.py prices the all-to-all by it). None: every GPU in
    # one node and one NVLink domain.
    gpus_per_node: int | None = None
    num_nodes: int = 1  # nodes the data-parallel group spans (data_parallel_size x tp = num_nodes x gpus_per_node)
    # GPUs joined by NVLink (8 on an HGX node, 72 in a GB200 NVL72 rack); None: one node's (gpus_per_node)
    nvlink_domain_gpus: int | None = None
    # The network between NVLink domains (InfiniBand, RoCE), Gb/s per GPU, one direction: 400 for a ConnectX-7 NDR
    # NIC per GPU
    internode_gbit_per_s: float | None = None

    @property
    def num_gpus(self) -> int:
        """The GPUs of one engine copy: its data-parallel ranks' tensor-parallel groups."""
        return self.data_parallel_size * self.tensor_parallel_size

    def describe(self) -> str:
        """'1x a10', '2 replicas of 4x h100-sxm' when there are several engines, 'data parallel 16 x 1x h200'."""
        engine = f"{self.tensor_parallel_size}x {self.gpu.name}"
        if self.data_parallel_size > 1:
            engine = f"data parallel {self.data_parallel_size} x {engine}"
        return engine if self.replicas == 1 else f"{self.replicas} replicas of {engine}"


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding, as vLLM's --speculative-config (vllm/config/speculative.py): its field names, its
    meanings. What the planner adds is said per field."""

    method: str  # ngram | eagle | eagle3 | mtp | draft_model
    num_speculative_tokens: int  # k: drafted tokens verified per decode step of each request
    # The draft model (draft_model), the EAGLE head (eagle, eagle3): a catalog model, a path to its config.json or
    # folder, or a mapping of its config fields. Not given for ngram (no model) nor mtp (the target's own layers).
    model: ModelSpec | None = None
    # As vLLM: 1 or the target's tensor_parallel_size (the default); the planner prices the latter only.
    draft_tensor_parallel_size: int | None = None
    prompt_lookup_max: int | None = None  # ngram: the longest n-gram looked up (vLLM's default: 5)
    prompt_lookup_min: int | None = None  # ngram: the shortest (vLLM's default: prompt_lookup_max, or 5)
    # How many drafts the target accepts (the planner's own key): per position i, the share of drafts whose first
    # i + 1 tokens are all accepted (non-increasing, one per speculative token). Neither this nor the length given:
    # the published default for the method and the model family (sim/acceptance.py), named in the summary.
    synthetic_acceptance_rates: tuple[float, ...] | None = None
    # Or vLLM's synthetic_acceptance_length: the mean acceptance length (1 + accepted drafts per step), spent on the
    # earliest positions first
    synthetic_acceptance_length: float | None = None
    # The planner's own: the share of a request's decode steps that carry drafts (vllm:spec_decode_num_drafts over
    # the decode steps). An n-gram lookup finds no match in the others; the model-based methods always draft (1).
    draft_rate: float = 1.0


@dataclass(frozen=True)
class KvOffloadConfig:
    """A KV tier in host memory under the GPU's prefix cache (vLLM's native OffloadingConnector,
    --kv-offloading-backend native --kv-offloading-size; sim/host_tier.py)."""

    size_gib: float  # pinned host memory per GPU for offloaded KV blocks (vLLM's flag: this times the TP size)
    host_link_gb_s: float  # GB/s (1e9 bytes/s) per GPU, host to GPU: the PCIe link's measured or spec bandwidth
    # The host memory (GiB) the engine may pin, when given (a node's RAM over the engines it runs): the tier of
    # every GPU of the engine must fit in it
    host_memory_gib: float | None = None
    # A local disk tier behind the host tier (LMCache's `local_disk` / `max_local_disk_size`, per GPU here; its
    # default 0 is no disk): every block the host tier stores is written to it too, and the blocks past the host
    # tier's hits are looked up there (sim/disk_tier.py). Its read and write GB/s (1e9 bytes/s) per GPU are
    # required with it: the disk's, measured or spec
    disk_gib: float | None = None
    disk_read_gb_s: float | None = None  # a load's disk blocks cross at the slower of this and the host link
    # the writes queue at this rate; a block is found on the disk once written (a slow disk falls behind)
    disk_write_gb_s: float | None = None


@dataclass(frozen=True)
class EngineConfig:
    """The engine's settings; those named as vLLM's flags mean what the flags mean."""

    scheduler: str = "continuous"  # continuous | static
    kv_cache: str = "paged"  # paged | contiguous
    block_size: int = 16  # tokens per KV block (vLLM default)
    gpu_memory_utilization: float = 0.9  # the share of the GPU's memory the engine may use (vLLM's flag)
    # Left out of a scenario, these two are what `vllm serve` picks on the scenario's GPU (sim/defaults.py:
    # 8192 / 1024 on >= 70 GiB GPUs other than A100s); validation fills them in. These values are vLLM's
    # for smaller GPUs, what a Scenario built in code without validation gets.
    max_num_seqs: int = 256  # requests running at once
    max_num_batched_tokens: int = 2048  # the token budget of one step
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    # Off: vLLM v1's rule, decodes first, then only whole prompts that fit what is left of the budget.
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True  # on by default in vLLM v1
    # vLLM's default False: CUDA graphs are captured (their memory estimate is taken from the KV pool) and
    # steps are scheduled asynchronously. True: no CUDA graphs, and here also serial steps (no async).
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"  # auto (= the model dtype) | float16 | bfloat16 | float32 | fp8
    num_gpu_blocks_override: int | None = None  # as vLLM's flag: skip the memory model's pool size
    # vLLM's --scheduler-reserve-full-isl (SchedulerConfig, on by default since PR #37307, March 2026): a waiting
    # or preempted request is admitted only when its whole sequence fits the free blocks, not just its first
    # chunk. False: the older admission on the first chunk.
    scheduler_reserve_full_isl: bool = True
    # vLLM's --async-scheduling (the default of today's vLLM; AsyncScheduler): the host schedules and prepares
    # step N+1 while the GPU runs step N. False: the host's work in series with the GPU's, as every vLLM before
    # the V1 engine (0.8) ran, so that a figure published for such an engine is compared with its engine.
    async_scheduling: bool = True
    # vLLM V0's --num-scheduler-steps (multi-step scheduling, 0.6-0.7; the V1 engine has none): a batch of decodes
    # runs this many steps from one schedule(). Requests arriving meanwhile wait for the block to end, and the host
    # schedules and prepares inputs once per block (the steps after the first advance their inputs on the GPU,
    # `advance_step`; each row's token is still processed); a step that computes prompt tokens is a block of one.
    # 1: every step is scheduled.
    num_scheduler_steps: int = 1
    speculative: SpeculativeConfig | None = None  # vLLM's --speculative-config; None: no speculative decoding
    # vLLM's --all2all-backend: the kernels that dispatch tokens to their experts' ranks and combine the results
    # under data parallel + expert parallel (sim/moe_group.py); vLLM's default allgather_reducescatter
    all2all_backend: str = "allgather_reducescatter"
    # vLLM's --enable-eplb: expert-parallel load balancing (vllm/distributed/eplb/) moves and replicates the busiest
    # experts so that every rank gets an even share of the routed tokens
    enable_eplb: bool = False
    # vLLM's --eplb-config num_redundant_experts: extra copies of experts per MoE layer, spread over the ranks
    eplb_num_redundant_experts: int = 0
    # The planner's own: how evenly this model's router spreads the traffic's tokens over the expert-parallel ranks,
    # as vLLM's EPLB logs it (--eplb-config log_balancedness: mean over max of the ranks' routed tokens, over its
    # window) for the placement without EPLB. None: a uniform router (only each step's random spread is uneven).
    # EPLB removes this skew (sim/moe_group.py).
    expert_load_balancedness: float | None = None
    # vLLM's --enable-dbo (dual-batch overlap, ParallelConfig): a lockstep step whose every rank passes its threshold
    # runs as two micro-batches, one's all-to-all overlapping the other's compute (sim/dual_batch.py). DeepEP only.
    enable_dbo: bool = False
    # vLLM's --dbo-decode-token-threshold: a rank's decode-only batch splits from this many tokens (vLLM's 32)
    dbo_decode_token_threshold: int = 32
    # vLLM's --dbo-prefill-token-threshold: a rank's batch with prompt tokens splits from this many (vLLM's 512)
    dbo_prefill_token_threshold: int = 512
    kv_offload: KvOffloadConfig | None = None  # a KV tier in host memory; None: evicted blocks are gone

    def max_model_len_for(self, model: ModelSpec) -> int:
        """The longest request this engine serves `model`: max_model_len, else the model's own limit."""
        return self.max_model_len or model.max_position_embeddings

    def kv_dtype_for(self, dtype: str) -> str:
        """The KV cache's dtype for a model run in `dtype`: kv_cache_dtype, `auto` being the model's."""
        return dtype if self.kv_cache_dtype == "auto" else self.kv_cache_dtype


@dataclass(frozen=True)
class Distribution:
    """A length distribution in tokens. `dist`: fixed | uniform | normal | lognormal | trace."""

    dist: str  # the distribution the lengths are drawn from
    value: int | None = None  # fixed
    low: int | None = None  # uniform, inclusive
    high: int | None = None  # uniform, inclusive
    mean: float | None = None  # normal, lognormal (of the lengths themselves, not of their log)
    std: float | None = None  # normal, lognormal
    min: int = 1  # every drawn length is clipped to [min, max]
    max: int | None = None  # None: no upper clip


@dataclass(frozen=True)
class ArrivalConfig:
    """When requests arrive. `process`: poisson | gamma | constant | closed | trace."""

    process: str = "poisson"  # when requests arrive: a process of a rate, a closed loop of users, or a trace's times
    rate: float | None = None  # requests/s; for trace: rescale the trace to this mean rate (None: as recorded)
    burstiness: float = 1.0  # gamma shape: 1 = poisson, < 1 burstier (as vLLM's bench)
    concurrency: int | None = None  # closed loop: users
    think_time_s: float = 0.0  # closed loop: pause between a reply and the user's next request


@dataclass(frozen=True)
class TraceConfig:
    """The trace file the workload's lengths or arrivals (or both) come from, and which columns."""

    path: str  # absolute once loaded (resolved against the scenario's folder)
    prompt_column: str = "num_prefill_tokens"  # a CSV column or JSONL key of prompt tokens
    output_column: str = "num_decode_tokens"  # ... of output tokens
    arrival_column: str | None = "arrived_at"  # ... of arrival times (arrival.process: trace)
    arrival_unit: str = "s"  # s | ms: the arrival column's unit (Mooncake's timestamps are ms)
    # Prefix identity (JSON Lines only): the key of each row's list of prompt block ids, each naming
    # `block_tokens` prompt tokens, chained (Mooncake's hash_ids: a block's id implies every block before it),
    # so rows whose first k ids agree share their first k * block_tokens prompt tokens.
    block_ids_column: str | None = None
    block_tokens: int = 512  # prompt tokens per trace block (Mooncake's 512), the last one possibly partial
    # Lengths from the trace: replay (rows in file order from row 0, wrapping around) | sample (rows
    # drawn uniformly at random with replacement). Trace arrivals are always replayed in order.
    row_order: str = "replay"


@dataclass(frozen=True)
class SharedPrefixConfig:
    """A system prompt of `tokens` tokens shared by groups of `group_size` consecutive requests."""

    tokens: int  # prompt tokens the group shares (a shorter prompt shares all of itself)
    group_size: int  # consecutive requests per group


@dataclass(frozen=True)
class SessionsConfig:
    """Multi-turn conversations or agent loops (sim/sessions.py): sessions arriving at `rate`, each of
    min_turns..max_turns requests; a turn's prompt is the previous turn's prompt and reply plus a new message."""

    rate: float  # sessions/s, Poisson
    min_turns: int  # turns per session: uniform in [min_turns, max_turns]
    max_turns: int
    # Each later turn's new message (a user's, or a tool's output in an agent loop), added to the context; the first
    # turn's prompt is workload.prompt_tokens, every reply workload.output_tokens
    message_tokens: Distribution
    # Mean seconds from one turn's arrival to the next's (exponential): the reply and the user's (or tool's) time
    # together, a turn not waiting for the previous reply; with wait_for_reply, from that reply's end
    turn_gap_s: float
    # true: a turn is sent its gap (the same draws) after the previous turn's reply is complete, as a chat client
    # or an agent loop does; false: at its own time, whatever the reply's latency
    wait_for_reply: bool = False
    # empty: the first session starts at 0, so turns come faster as sessions accumulate; steady: the run starts
    # with sessions under way, as on a server up for a while (those begun earlier send only their later turns,
    # whose contexts hold the earlier ones): turns arrive at a steady rate from the start (planner size's probes)
    start: str = "empty"


@dataclass(frozen=True)
class WorkloadConfig:
    """The requests: how many, when they arrive and how long their prompts and replies are."""

    num_requests: int = 100  # requests the run sends
    seed: int = 0  # the same seed gives the same requests in both modes
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    prompt_tokens: Distribution = field(default_factory=lambda: Distribution("fixed", value=128))
    output_tokens: Distribution = field(default_factory=lambda: Distribution("fixed", value=128))
    trace: TraceConfig | None = None
    shared_prefix: SharedPrefixConfig | None = None
    sessions: SessionsConfig | None = None  # multi-turn sessions instead of independent requests
    too_long: str = "reject"  # reject | truncate: requests with prompt + output > max_model_len


@dataclass(frozen=True)
class SloConfig:
    """Percentile -> bound, per metric, in ms; e.g. ttft_ms = {"p99": 500.0}."""

    ttft_ms: dict[str, float] = field(default_factory=dict)
    tpot_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    e2el_ms: dict[str, float] = field(default_factory=dict)


# A fleet's pools serve requests in one of three roles (vLLM's disaggregated serving: a prefill instance computes a
# prompt's KV and samples its first token, a decode instance pulls that KV and decodes; sim/fleet.py).
POOL_ROLES = ("mixed", "prefill", "decode")


@dataclass(frozen=True)
class PoolConfig:
    """One pool of a fleet, under its name (fleet.pools.NAME): `hardware.replicas` identical engines on their own
    GPUs, with their own settings. `model`, if given, must be the scenario's."""

    name: str  # the pool's key under fleet.pools
    hardware: HardwareConfig  # the pool's gpu, tensor_parallel_size, replicas and expert_parallel
    # the keys the pool sets over the scenario's `engine` (the rest are the scenario's)
    engine: EngineConfig = field(default_factory=EngineConfig)
    # mixed: whole requests, as a one-pool scenario's replicas; prefill: prompts only, their KV then pulled by a
    # decode pool; decode: the replies of prompts a prefill pool computed
    role: str = "mixed"


@dataclass(frozen=True)
class FleetRouterConfig:
    """How a fleet's router picks the replica (and, by prompt length, the pool) each request goes to."""

    # round_robin | least_outstanding | prefix | length: in turn; the replica with the fewest requests not finished;
    # the one holding the longest cached prefix of the prompt (llm-d's prefix scorer, Dynamo's KV router), ties
    # to the least outstanding; by prompt length, to short_pool up to threshold_tokens, to long_pool above
    policy: str = "round_robin"
    threshold_tokens: int | None = None  # length: the longest prompt sent to short_pool
    short_pool: str | None = None  # length: the pool of prompts of at most threshold_tokens tokens
    long_pool: str | None = None  # length: the pool of longer prompts


@dataclass(frozen=True)
class KvTransferConfig:
    """The link a prefill pool's KV cache crosses to the decode pool, and the vLLM connector that moves it."""

    link: str  # nvlink | infiniband | roce | pcie | tcp | host_memory (two engines in one process)
    bandwidth_gbit_per_s: float | None = None  # per GPU, one direction, in Gb/s (bits): InfiniBand NDR 400
    latency_ms: float | None = None  # fixed cost per transfer (handshake, notification); None: the link kind's
    # whether the KV streams out layer by layer during the prefill (LMCache, Mooncake, P2pNccl) or moves once the
    # prefill is done (vLLM's NixlConnector)
    layerwise: bool = False
    connector: str = "NixlConnector"  # NixlConnector | MooncakeConnector | LMCacheConnectorV1 | P2pNcclConnector


@dataclass(frozen=True)
class FleetConfig:
    """Several pools behind one router, instead of one `hardware` block (sim/fleet.py runs it)."""

    pools: tuple[PoolConfig, ...]  # by name, in the file's order
    router: FleetRouterConfig = field(default_factory=FleetRouterConfig)
    kv_transfer: KvTransferConfig | None = None  # a prefill pool's link to the decode pool

    def pool(self, name: str) -> PoolConfig:
        return next(p for p in self.pools if p.name == name)

    def with_role(self, role: str) -> tuple[PoolConfig, ...]:
        return tuple(p for p in self.pools if p.role == role)

    @property
    def disaggregated(self) -> bool:
        return any(p.role != "mixed" for p in self.pools)

    @property
    def num_gpus(self) -> int:
        return sum(p.hardware.replicas * p.hardware.num_gpus for p in self.pools)

    def describe(self) -> str:
        """'2x prefill (4x h100-sxm) + 1x decode (4x h100-sxm)'; a data-parallel pool's replicas are its groups:
        '1x decode (data parallel 16 x 1x h200)'."""
        return " + ".join(
            f"{p.hardware.replicas}x {p.name} ({replace(p.hardware, replicas=1).describe()})" for p in self.pools
        )


@dataclass(frozen=True)
class Scenario:
    """A validated scenario file: what runs (model, dtype), on what (hardware, engine), serving what (workload,
    slo)."""

    name: str  # names the run in its outputs
    model: ModelSpec  # what runs: a catalog model, a local HF config.json or folder, or its fields
    dtype: str  # the weights' and activations' dtype
    hardware: HardwareConfig
    engine: EngineConfig
    workload: WorkloadConfig
    slo: SloConfig  # the latency bounds goodput and `planner size` hold the run to
    source: str = "<inline>"  # the file it came from, for messages
    # The cost model's coefficients: `auto` (the newest matching profile in the user's profile folder, else a
    # shipped one, else spec-sheet defaults) or a profile file (relative to the scenario's folder).
    calibration: str = "auto"
    # Several pools behind a router (sim/fleet.py) instead of one pool; `hardware` and `engine` are then the first
    # pool's. None: one pool, `hardware`.
    fleet: FleetConfig | None = None

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len_for(self.model)

    def pool_scenario(self, pool: PoolConfig) -> "Scenario":
        """One pool of the fleet as a scenario of its own: its hardware and engine, the rest this one's."""
        return replace(self, hardware=pool.hardware, engine=pool.engine, fleet=None)

    @property
    def kv_dtype(self) -> str:
        return self.engine.kv_dtype_for(self.dtype)
