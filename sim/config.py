"""The validated scenario as plain frozen dataclasses.

`planner.scenario.load` parses and validates the YAML into these; everything below `planner/` (the simulator,
the live engine) takes them as they are and never re-reads a file. Units are in the field names.

No `from __future__ import annotations` here, unlike everywhere else: validation reads these classes' type
hints (typing.get_type_hints), and as strings each would be compiled and evaluated again at every start-up.
Every class has a docstring, which also spares `dataclass` building one from the class's signature.
"""

from dataclasses import dataclass, field, replace

HOST_DEVICES = ("cpu",)  # catalog GPUs that are the host itself: no CUDA graphs, nothing overlaps
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, normalised from an HF config.json (planner/catalog).

    Field names follow HF's Llama/Qwen2 config; `intermediate_size` is the dense MLP width (Qwen-7B's config
    says 22016, twice its width of 11008, because its gate and up projections are counted together).
    Mixture-of-experts, sliding-window, latent-attention and quantisation fields default to "absent", so a
    dense bf16 Llama needs none of them.
    """

    name: str
    model_type: (
        str  # llama | qwen2 | qwen3 | mistral | qwen | qwen3_moe | mixtral | gpt_oss | gemma3_text | deepseek_v3
    )
    hidden_size: int
    intermediate_size: int  # dense MLP width: gate, up [hidden -> intermediate], down [intermediate -> hidden]
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int  # < num_attention_heads: grouped-query attention
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q, k, v projections (Qwen, Qwen2; gpt-oss also on o)
    qk_norm: bool = False  # RMSNorm on each head of q and k (Qwen3, Gemma 3)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    # RoPE frequency rescaling, as config.json's rope_scaling: None, or {"rope_type": ..., numbers}. Llama-3.1's
    # "llama3" changes the live engine's rotary angles; "linear" and "yarn" (Gemma 3, gpt-oss, DeepSeek-V3) are
    # described for sizes and costs only (the live engine refuses them). Not hashed: a dict.
    rope_scaling: dict | None = field(default=None, hash=False)
    published_params: int | None = None  # the model card's count, for the catalog test only
    # What vLLM loads (`vllm serve CHECKPOINT`): the HF repository id a catalog model was copied from, or the local
    # folder of a config read from a path; None for an inline mapping or an unpublished catalog model. Not compared:
    # two specs of one architecture are the same model to the simulator.
    checkpoint: str | None = field(default=None, compare=False)
    # --- mixture of experts (num_experts 0: a dense model) ---
    num_experts: int = 0  # routed experts per MoE layer (num_experts / num_local_experts / n_routed_experts)
    num_experts_per_tok: int = 0  # top-k of the router
    moe_intermediate_size: int = 0  # one routed expert's FFN width (SwiGLU: gate, up, down)
    shared_expert_intermediate_size: int = 0  # all shared experts together (DeepSeek: n_shared_experts x width)
    dense_layers: tuple[int, ...] = ()  # layers of a MoE model whose MLP is dense (first_k_dense_replace ...)
    expert_bias: bool = False  # gpt-oss: biases on the router and on every expert's projections
    norm_topk_prob: bool = True  # renormalise the top-k routing weights to sum to 1 (Mixtral always)
    # --- attention ---
    sliding_window: int | None = None  # tokens a sliding-window layer attends to (itself included)
    sliding_layers: tuple[int, ...] = ()  # the layers that use it (layer_types / sliding_window_pattern)
    post_norms: bool = False  # Gemma 3: post-attention and post-feedforward RMSNorms (4 norms per layer)
    # Multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank 0: none): K and V come from a cached latent of
    # kv_lora_rank plus a shared RoPE key of qk_rope_head_dim.
    q_lora_rank: int = 0  # 0: q projected directly from the hidden state
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # --- quantised weights (quantization_config; None: every weight in the scenario's dtype) ---
    quant_method: str | None = None  # fp8 | awq | gptq | mxfp4
    weight_bits: int = 16  # bits of a quantised weight
    quant_group_size: int = 0  # weights sharing one scale (fp8 block 128x128: 16384); 0: per tensor/channel
    experts_only_quantized: bool = False  # mxfp4 (gpt-oss): attention, router, embeddings stay in bf16
    # --- speculative decoding (0: absent) ---
    # Multi-token-prediction modules (DeepSeek-V3's num_nextn_predict_layers): loaded only when the engine speculates
    # with method mtp, which runs them as the drafter (sim/draft_model.py).
    num_nextn_predict_layers: int = 0
    # An EAGLE-3 head's own LM head is over a reduced vocabulary of this many tokens (its config.json's
    # draft_vocab_size, mapped onto the target's by its d2t table); 0: vocab_size.
    draft_vocab_size: int = 0

    def __post_init__(self) -> None:
        # A spec read back from JSON (calibration profiles) has lists; keep the dataclass hashable.
        for name in ("dense_layers", "sliding_layers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    # --- structure ---

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - len(self.dense_layers) if self.is_moe else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def num_sliding_layers(self) -> int:
        return len(self.sliding_layers) if self.sliding_window else 0

    # --- parameters, split by how a step reads them ---

    @property
    def attention_linear_weights(self) -> int:
        """One layer's attention projection weights (biases excluded)."""
        h = self.hidden_size
        if self.is_mla:  # DeepseekV2MLAAttention: q_a/q_b (or q), kv_a (latent + rope key), kv_b, o
            heads, qk_head = self.num_attention_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * heads * qk_head if self.q_lora_rank else h * heads * qk_head
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h
        return h * (self.q_size + 2 * self.kv_size) + self.q_size * h

    @property
    def expert_weights(self) -> int:
        """One routed expert's gate, up and down weights."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_linear_weights(self) -> int:
        """Linear weights every token goes through (quantisable): attention, dense MLPs, shared experts."""
        per_layer_mlp = 3 * self.hidden_size * self.intermediate_size
        shared = 3 * self.hidden_size * self.shared_expert_intermediate_size
        return (
            self.num_hidden_layers * self.attention_linear_weights
            + self.num_dense_mlp_layers * per_layer_mlp
            + self.num_moe_layers * shared
        )

    @property
    def routed_expert_weights(self) -> int:
        """All routed experts' weights, stored (every expert of every MoE layer)."""
        return self.num_moe_layers * self.num_experts * self.expert_weights

    @property
    def other_params(self) -> int:
        """Never quantised: embeddings, lm_head, norms, biases, routers (gpt-oss's attention sinks, 64 per
        layer, and o_proj bias, hidden per layer, are counted; DeepSeek-V3's router score bias too)."""
        h, layers = self.hidden_size, self.num_hidden_layers
        norms = (4 if self.post_norms else 2) * h + (2 * self.head_dim if self.qk_norm else 0)
        norms += self.q_lora_rank + self.kv_lora_rank  # MLA's latent norms
        bias = self.q_size + 2 * self.kv_size if self.attention_bias else 0
        if self.model_type == "gpt_oss":
            bias += h + self.num_attention_heads  # o_proj bias and the per-head attention sinks
        router = h * self.num_experts + (
            self.num_experts if self.expert_bias or self.model_type == "deepseek_v3" else 0
        )
        expert_biases = self.num_experts * (2 * self.moe_intermediate_size + h) if self.expert_bias else 0
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (
            self.embedding_params
            + lm_head
            + h  # final norm
            + layers * (norms + bias)
            + self.num_moe_layers * (router + expert_biases)
        )

    @property
    def params_per_layer(self) -> int:
        """A decoder layer's parameters, averaged over the layers (exact for a model whose layers are alike)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        body = self.num_params - self.embedding_params - lm_head - self.hidden_size
        return body // self.num_hidden_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        return self.dense_linear_weights + self.routed_expert_weights + self.other_params

    @property
    def active_params(self) -> int:
        """Parameters one token goes through: all but the routed experts it is not sent to."""
        unrouted = self.num_moe_layers * (self.num_experts - self.num_experts_per_tok) * self.expert_weights
        return self.num_params - unrouted

    # --- quantisation ---

    @property
    def quantized_bits_per_weight(self) -> float | None:
        """Stored bits of one quantised weight, its share of the scales (and zero points) included; None when
        the weights are not quantised. fp8 block quantisation (DeepSeek-V3, weight_block_size 128x128): one
        float32 scale per block. AWQ: an fp16 scale and a packed zero point per group. GPTQ: the same (its
        g_idx, one int32 per input row, is under 0.1% and left out). MXFP4 (gpt-oss): one uint8 exponent per
        32 weights."""
        if self.quant_method is None:
            return None
        bits = float(self.weight_bits)
        if self.quant_group_size:
            scale_bits = {"fp8": 32, "awq": 16 + self.weight_bits, "gptq": 16 + self.weight_bits, "mxfp4": 8}
            bits += scale_bits[self.quant_method] / self.quant_group_size
        return bits

    def weight_bytes(self, dtype_bytes: int) -> tuple[float, float]:
        """(dense, routed experts) stored bytes, with unquantised parameters in `dtype_bytes` each."""
        qbits = self.quantized_bits_per_weight
        experts = self.routed_expert_weights
        if qbits is None:
            return float((self.num_params - experts) * dtype_bytes), float(experts * dtype_bytes)
        dense_linear = self.dense_linear_weights
        dense_q = 0 if self.experts_only_quantized else dense_linear
        dense = (self.other_params + dense_linear - dense_q) * dtype_bytes + dense_q * qbits / 8
        return float(dense), experts * qbits / 8

    def live_engine_unsupported(self) -> list[str]:
        """What the live engine (gpu_engine) does not implement for this model; empty: it runs it."""
        problems = []
        if self.is_moe and self.model_type not in ("qwen3_moe", "mixtral"):
            problems.append(f"mixture of experts of model_type {self.model_type}")
        if self.is_mla:
            problems.append("multi-head latent attention")
        if self.quant_method:
            problems.append(f"{self.quant_method} quantised weights")
        if self.post_norms or self.model_type not in (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "qwen",
            "qwen3_moe",
            "mixtral",
        ):
            problems.append(f"model_type {self.model_type}")
        if self.rope_scaling and self.rope_scaling.get("rope_type") != "llama3":
            problems.append(f"rope_scaling {self.rope_scaling.get('rope_type')}")
        return problems


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


@dataclass(frozen=True)
class HardwareConfig:
    """The GPUs of a deployment: `replicas` engines of `tensor_parallel_size` GPUs each."""

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

    def describe(self) -> str:
        """'1x a10', or '2 replicas of 4x h100-sxm' when there are several engines."""
        engine = f"{self.tensor_parallel_size}x {self.gpu.name}"
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
    # together. Open loop: a turn does not wait for the previous reply
    turn_gap_s: float


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
        return sum(p.hardware.replicas * p.hardware.tensor_parallel_size for p in self.pools)

    def describe(self) -> str:
        """'2x prefill (4x h100-sxm) + 1x decode (4x h100-sxm)'."""
        return " + ".join(
            f"{p.hardware.replicas}x {p.name} ({p.hardware.tensor_parallel_size}x {p.hardware.gpu.name})"
            for p in self.pools
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
