"""The validated scenario as plain frozen dataclasses.

`planner.scenario` parses and validates the YAML into these; everything below `planner/` (the simulator,
the live engine) takes them as they are and never re-reads a file. Units are in the field names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, normalised from an HF config.json.

    Field names follow HF's Llama/Qwen2 config; `intermediate_size` is the MLP width (Qwen-7B's config
    says 22016, twice its width of 11008, because its gate and up projections are counted together).
    """

    name: str
    model_type: str  # llama | qwen2 | qwen3 | mistral | qwen
    hidden_size: int
    intermediate_size: int  # MLP width: gate, up [hidden -> intermediate], down [intermediate -> hidden]
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int  # < num_attention_heads: grouped-query attention
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q, k, v projections (Qwen, Qwen2)
    qk_norm: bool = False  # RMSNorm on each head of q and k (Qwen3)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    # RoPE frequency rescaling, as config.json's rope_scaling: None, or Llama-3.1's {"rope_type": "llama3",
    # "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}. It changes the
    # live engine's rotary angles, not sizes or costs. Not hashed: a dict (the catalog validates it).
    rope_scaling: dict | None = field(default=None, hash=False)
    published_params: int | None = None  # the model card's count, for the catalog test only

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        h = self.hidden_size
        qkv = h * (self.q_size + 2 * self.kv_size)
        if self.attention_bias:
            qkv += self.q_size + 2 * self.kv_size
        attn = qkv + self.q_size * h
        mlp = 3 * h * self.intermediate_size
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attn + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        final_norm = self.hidden_size
        return self.embedding_params + self.num_hidden_layers * self.params_per_layer + final_norm + lm_head


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator (or a CPU, for runs on this machine). Dense figures only, never sparse ones."""

    name: str
    memory_bytes: int  # total memory as the driver reports it (torch.cuda.mem_get_info()[1])
    bf16_tflops: float  # dense bf16/fp16 tensor-core peak
    memory_bandwidth_gbps: float  # GB/s (1e9 bytes/s)
    fp8_tflops: float | None = None
    interconnect_bandwidth_gbps: float | None = None  # GB/s per GPU, one direction (NVLink / xGMI / PCIe)
    tdp_w: float | None = None
    rental_usd_per_hour: float | None = None
    purchase_usd: float | None = None


@dataclass(frozen=True)
class HardwareConfig:
    gpu: GpuSpec
    tensor_parallel_size: int = 1
    replicas: int = 1
    router: str = "round_robin"  # round_robin | least_outstanding


@dataclass(frozen=True)
class EngineConfig:
    scheduler: str = "continuous"  # continuous | static
    kv_cache: str = "paged"  # paged | contiguous
    block_size: int = 16  # tokens per KV block (vLLM default)
    gpu_memory_utilization: float = 0.9
    # Left out of a scenario, these two are what `vllm serve` picks on the scenario's GPU (sim/defaults.py:
    # 8192 / 1024 on >= 70 GiB GPUs other than A100s); validation fills them in. These values are vLLM's
    # for smaller GPUs, what a Scenario built in code without validation gets.
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # None: the model's max_position_embeddings
    # Off: vLLM v1's rule, decodes first, then only whole prompts that fit what is left of the budget.
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True  # on by default in vLLM v1
    # vLLM's default False: CUDA graphs are captured (their memory estimate is taken from the KV pool) and
    # steps are scheduled asynchronously. True: no CUDA graphs, and here also serial steps (no async).
    enforce_eager: bool = False
    kv_cache_dtype: str = "auto"  # auto (= the model dtype) | float16 | bfloat16 | float32 | fp8
    num_gpu_blocks_override: int | None = None  # as vLLM's flag: skip the memory model's pool size


@dataclass(frozen=True)
class Distribution:
    """A length distribution in tokens. `dist`: fixed | uniform | normal | lognormal | trace."""

    dist: str
    value: int | None = None  # fixed
    low: int | None = None  # uniform, inclusive
    high: int | None = None  # uniform, inclusive
    mean: float | None = None  # normal, lognormal (of the lengths themselves, not of their log)
    std: float | None = None  # normal, lognormal
    min: int = 1
    max: int | None = None


@dataclass(frozen=True)
class ArrivalConfig:
    """`process`: poisson | gamma | constant | closed | trace."""

    process: str = "poisson"
    rate: float | None = None  # requests/s; for trace: rescale the trace to this mean rate (None: as recorded)
    burstiness: float = 1.0  # gamma shape: 1 = poisson, < 1 burstier (as vLLM's bench)
    concurrency: int | None = None  # closed loop: users
    think_time_s: float = 0.0  # closed loop: pause between a reply and the user's next request


@dataclass(frozen=True)
class TraceConfig:
    path: str  # absolute once loaded (resolved against the scenario's folder)
    prompt_column: str = "num_prefill_tokens"
    output_column: str = "num_decode_tokens"
    arrival_column: str | None = "arrived_at"
    # Lengths from the trace: replay (rows in file order from row 0, wrapping around) | sample (rows
    # drawn uniformly at random with replacement). Trace arrivals are always replayed in order.
    row_order: str = "replay"


@dataclass(frozen=True)
class SharedPrefixConfig:
    """A system prompt of `tokens` tokens shared by groups of `group_size` consecutive requests."""

    tokens: int
    group_size: int


@dataclass(frozen=True)
class WorkloadConfig:
    num_requests: int = 100
    seed: int = 0
    arrival: ArrivalConfig = field(default_factory=ArrivalConfig)
    prompt_tokens: Distribution = field(default_factory=lambda: Distribution("fixed", value=128))
    output_tokens: Distribution = field(default_factory=lambda: Distribution("fixed", value=128))
    trace: TraceConfig | None = None
    shared_prefix: SharedPrefixConfig | None = None
    too_long: str = "reject"  # reject | truncate: requests with prompt + output > max_model_len


@dataclass(frozen=True)
class SloConfig:
    """Percentile -> bound, per metric, in ms; e.g. ttft_ms = {"p99": 500.0}."""

    ttft_ms: dict[str, float] = field(default_factory=dict)
    tpot_ms: dict[str, float] = field(default_factory=dict)
    itl_ms: dict[str, float] = field(default_factory=dict)
    e2el_ms: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    name: str
    model: ModelSpec
    dtype: str
    hardware: HardwareConfig
    engine: EngineConfig
    workload: WorkloadConfig
    slo: SloConfig
    source: str = "<inline>"  # the file it came from, for messages
    # The cost model's coefficients: `auto` (the newest matching profile in the user's profile folder, else a
    # shipped one, else spec-sheet defaults) or a profile file (relative to the scenario's folder).
    calibration: str = "auto"

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len or self.model.max_position_embeddings

    @property
    def kv_dtype(self) -> str:
        return self.dtype if self.engine.kv_cache_dtype == "auto" else self.engine.kv_cache_dtype
