"""The memory model: what vLLM's start-up profiling finds, predicted from the architecture.

vLLM v1 (`Worker.determine_available_memory`, vllm/v1/worker/gpu_worker.py, as in v0.21 and later) takes
ceil(gpu_memory_utilization x the total memory the driver reports), subtracts the weights, the rise of
torch's peak allocation during a profiling forward of max_num_batched_tokens tokens (plus a sampler run over
max_num_seqs rows of logits), the growth of non-torch memory during that run and, unless enforce_eager, its
estimate of the CUDA graphs' memory (`GPUModelRunner.profile_cudagraph_memory`; subtracted by default since
v0.21, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); what is left becomes KV blocks:
    num_blocks = available // (2 * block_size * num_kv_heads * head_dim * bytes) // num_layers
(the page of a latent-attention layer is block_size * (kv_lora_rank + qk_rope_head_dim) * bytes; with
sliding-window layers, the layers are grouped as vLLM's hybrid allocator does: kv_cache_groups). The CUDA context, created before the baseline is taken, is not subtracted. num_blocks counts vLLM's null
block (block 0, never given to a request: sim/block_pool.py), as vLLM's "GPU KV cache size" does.
The live engine is eager (it captures no graphs): its own profiling (gpu_engine/profiling.py) has no graph
term, the same as this model with enforce_eager true.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from math import ceil

from sim.config import DTYPE_BYTES, Scenario

GIB = 1 << 30

# Non-torch memory that appears during profiling (cuBLAS workspaces, allocator slack). vLLM start-up logs
# show 0.09-0.20 GiB at tensor parallel 1 (vllm-project/vllm #14447, #12126).
NON_TORCH_BYTES_TP1 = int(0.2 * GIB)
# NCCL's buffers under tensor parallel: +1.79 GiB going from tp=1 to tp=2 for Llama-3-8B on an H100
# (vllm-project/vllm #10511, "non_torch_memory 1.79GiB" -> "3.58GiB").
NCCL_BYTES_PER_GPU = int(1.79 * GIB)
# The sampler holds the logits in float32 plus about two same-sized temporaries (probabilities and
# log-probabilities / a temperature-scaled copy) while it runs over max_num_seqs rows.
SAMPLER_FP32_COPIES = 3

# CUDA graphs (vLLM's default cudagraph_mode FULL_AND_PIECEWISE). `profile_cudagraph_memory` captures the two
# largest sizes of each mode and estimates: first capture (the graph pool's activations at the largest size)
# + (number of graphs - 1) x the second capture's cost, per mode, the first captures overlaid (max). The
# per-graph cost is the driver's memory for the graph's nodes, a few MiB, so we model it per layer. Fitted to
# the one start-up log that has every setting (docs/vllm-fidelity.md: Qwen3-8B, 84 graphs, 0.52 GiB
# estimated): 0.16 MiB per layer per graph.
CUDA_GRAPH_BYTES_PER_LAYER = int(0.16 * (1 << 20))
MAX_CUDA_GRAPH_CAPTURE_SIZE = 512  # CompilationConfig: max_cudagraph_capture_size = min(2 x max_num_seqs, 512)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per GPU, in bytes unless the name says otherwise."""

    total_bytes: int  # as the driver reports it
    usable_bytes: int  # total x gpu_memory_utilization
    weights_bytes: int
    kv_bytes_per_token: int
    block_bytes: int
    activation_bytes: int
    activation_mlp_bytes: int  # the peak inside a layer: residual, normed input, gate_up, act output
    activation_sampler_bytes: int  # fp32 logits and temporaries over max_num_seqs rows
    non_torch_bytes: int
    cuda_graph_bytes: int  # vLLM's estimate of the CUDA graphs' memory; 0 with enforce_eager
    kv_cache_bytes: int  # what is left for the KV pool (may be negative: the deployment does not fit)
    num_gpu_blocks: int  # as vLLM's num_gpu_blocks: the null block included (requests get one fewer)
    max_kv_tokens: int
    max_model_len: int
    block_size: int
    # vLLM's hybrid allocator (sliding-window models): the pool's blocks are shared by kv_cache_groups groups
    # of layers; sliding_groups of them hold at most sliding_window_blocks blocks per request.
    kv_cache_groups: int = 1
    sliding_groups: int = 0
    sliding_window_blocks: int = 0

    @property
    def num_usable_blocks(self) -> int:
        return max(0, self.num_gpu_blocks - 1)  # all but the null block

    @property
    def max_concurrency_at_max_len(self) -> float:
        """vLLM's 'Maximum concurrency for L tokens per request': whole requests of max_model_len."""
        return self.requests_that_fit(self.max_model_len)

    def requests_that_fit(self, tokens_per_request: float) -> float:
        """Requests of this many tokens the pool holds. With sliding-window groups, as vLLM's
        `get_max_concurrency_for_kv_cache_config` (vllm/v1/core/kv_cache_utils.py): the pool has
        num_gpu_blocks x kv_cache_groups blocks; a request takes ceil(tokens / block_size) in each full-attention
        group and at most sliding_window_blocks in each sliding one."""
        full_blocks = ceil(tokens_per_request / self.block_size)
        if not self.sliding_groups:
            return self.num_gpu_blocks / full_blocks
        per_request = (self.kv_cache_groups - self.sliding_groups) * full_blocks + self.sliding_groups * min(
            full_blocks, self.sliding_window_blocks
        )
        return self.num_gpu_blocks * self.kv_cache_groups / per_request

    def to_dict(self) -> dict:
        return asdict(self) | {"max_concurrency_at_max_len": self.max_concurrency_at_max_len}


def kv_heads_per_gpu(num_kv_heads: int, tensor_parallel_size: int) -> int:
    """KV heads are split across ranks, and replicated when there are fewer heads than ranks (vLLM)."""
    return max(1, num_kv_heads // tensor_parallel_size)


def kv_bytes_per_token_per_layer(scenario: Scenario) -> int:
    """One token's cache in one attention layer, on one GPU, as vLLM's page size counts it.

    Multi-head latent attention (`MLAAttentionSpec`) caches the latent: kv_lora_rank + qk_rope_head_dim values,
    one "head", replicated on every tensor-parallel rank. Otherwise K and V of this rank's KV heads."""
    m = scenario.model
    if m.is_mla:
        return (m.kv_lora_rank + m.qk_rope_head_dim) * DTYPE_BYTES[scenario.kv_dtype]
    heads = kv_heads_per_gpu(m.num_key_value_heads, scenario.hardware.tensor_parallel_size)
    return 2 * heads * m.head_dim * DTYPE_BYTES[scenario.kv_dtype]


def kv_cache_groups(scenario: Scenario) -> tuple[int, int, int]:
    """(layers per group, groups, sliding groups) as vLLM's `_get_kv_cache_groups_uniform_page_size`
    (vllm/v1/core/kv_cache_utils.py) groups a model's layers. One attention type: one group of all layers.
    Full and sliding layers: groups of the smaller type's layer count (or the larger's, when that is under
    1.25x the smaller: fewer padding slots), each type split into ceil(count / group size) groups. The pool
    holds one tensor per slot of a group, shared by one layer of every group."""
    m = scenario.model
    sliding = m.num_sliding_layers
    full = m.num_hidden_layers - sliding
    if not sliding or not full:
        return m.num_hidden_layers, 1, 1 if sliding else 0
    group = min(full, sliding)
    if max(full, sliding) < group * 1.25:
        group = max(full, sliding)
    return group, ceil(full / group) + ceil(sliding / group), ceil(sliding / group)


def kv_bytes_per_token(scenario: Scenario) -> int:
    """Bytes of the KV pool per token of one block-pool block, on one GPU: every layer slot of every group.

    For one attention type that is every layer's K and V (or MLA latent). For a hybrid model it is what vLLM's
    "GPU KV cache size: N tokens" divides by (num_blocks // groups x block_size); a sliding-window group then
    holds at most its window's blocks per request (`MemoryBreakdown.requests_that_fit`)."""
    per_layer_group, groups, _ = kv_cache_groups(scenario)
    return per_layer_group * groups * kv_bytes_per_token_per_layer(scenario)


def sliding_window_blocks(scenario: Scenario) -> int:
    """Blocks a sliding-window layer holds per request at most, as vLLM's `SlidingWindowSpec.
    max_memory_usage_bytes`: the last window - 1 tokens plus a step's new ones, one more block because the
    window need not start at a block boundary."""
    m, e = scenario.model, scenario.engine
    if not m.num_sliding_layers:
        return 0
    tokens = min(m.sliding_window - 1 + e.max_num_batched_tokens, scenario.max_model_len)
    return ceil(tokens / e.block_size) + 1


def expert_parallel_size(scenario: Scenario) -> int:
    """The ranks a mixture of experts' routed experts are placed on whole (vLLM's ep_size), 1 without expert
    parallel. vLLM's `FusedMoEParallelConfig.make` (vllm/model_executor/layers/fused_moe/config.py) makes it
    tp x dp with --enable-expert-parallel, and the experts' own tensor-parallel size 1; the planner's replicas
    are independent engines (no data parallel), so it is the tensor-parallel size."""
    hw = scenario.hardware
    return hw.tensor_parallel_size if hw.expert_parallel and scenario.model.is_moe else 1


def expert_tensor_parallel_size(scenario: Scenario) -> int:
    """The ranks each routed expert is split over (by its intermediate dimension): tp, or 1 under expert
    parallel (the experts are whole)."""
    return 1 if expert_parallel_size(scenario) > 1 else scenario.hardware.tensor_parallel_size


def max_local_experts(scenario: Scenario) -> int:
    """Routed experts per MoE layer on the rank that holds the most. vLLM's `determine_expert_map`
    (fused_moe/layer.py; expert_map_manager.py in later versions), linear placement: every rank gets
    num_experts // ep_size and the first num_experts % ep_size ranks one more, so the largest holds the
    ceiling. Without expert parallel every rank holds a slice of every expert."""
    return ceil(scenario.model.num_experts / expert_parallel_size(scenario))


def weights_bytes(scenario: Scenario) -> int:
    """Every parameter once, every expert included, quantised weights at their stored size with their scales
    (ModelSpec.weight_bytes), on the rank that holds the most. Split evenly over tensor-parallel ranks (vLLM
    shards experts over TP ranks too, by their intermediate dimension; norms, routers and MLA's small
    down-projections are replicated: negligible). Under expert parallel the routed experts are not sliced but
    placed whole (`max_local_experts`): with an uneven count the largest rank's share sets the memory, and
    vLLM profiles every rank and keeps the smallest KV pool."""
    dense, experts = scenario.model.weight_bytes(DTYPE_BYTES[scenario.dtype])
    tp = scenario.hardware.tensor_parallel_size
    if expert_parallel_size(scenario) == 1:
        return int(dense + experts) // tp
    return int(dense) // tp + int(experts * max_local_experts(scenario) / scenario.model.num_experts)


# vLLM's fused MoE processes at most this many tokens at once (VLLM_FUSED_MOE_CHUNK_SIZE, vllm/envs.py).
FUSED_MOE_CHUNK_TOKENS = 32768


def forward_peak_bytes(scenario: Scenario, tokens: int) -> int:
    """The forward's peak for `tokens` tokens, inside the MLP of a layer (see activation_bytes).

    Dense MLP: the residual and the normed input [T, hidden], the fused gate_up output [T, 2*I/tp] and the
    activated product [T, I/tp]. MoE layer, as vLLM's `fused_experts_impl` allocates its workspaces for
    M = min(T, chunk) tokens: cache13 [M, top_k, max(2*I/tp, hidden)] (gate_up output and the experts' down
    output share it), cache2 [M * top_k, I/tp], plus the residual, the normed input, the layer's output
    [T, hidden] and the router's float32 logits [T, experts]. Under expert parallel (tensor parallel 1 for
    the experts) I is the whole expert's width: without data parallel every rank gets every token and the
    workspaces are sized for all M x top_k routed rows, those of other ranks' experts skipped (expert_map -1)."""
    m, tp = scenario.model, scenario.hardware.tensor_parallel_size
    dtype = DTYPE_BYTES[scenario.dtype]
    peak = 0
    if m.num_dense_mlp_layers:
        peak = tokens * dtype * (2 * m.hidden_size + 3 * m.intermediate_size // tp)
    if m.num_moe_layers:
        width, k = m.moe_intermediate_size // expert_tensor_parallel_size(scenario), m.num_experts_per_tok
        chunk = min(tokens, FUSED_MOE_CHUNK_TOKENS)
        workspace = chunk * k * (max(2 * width, m.hidden_size) + width) * dtype
        moe = tokens * dtype * 3 * m.hidden_size + workspace + tokens * m.num_experts * 4
        moe += tokens * dtype * 3 * m.shared_expert_intermediate_size // tp  # shared experts' gate_up and act
        peak = max(peak, moe)
    return peak


def activation_bytes(scenario: Scenario) -> tuple[int, int]:
    """(mlp_peak, sampler) bytes of the profiling run's peak.

    The forward's peak is inside the MLP of a layer: the residual and the normed input [T, hidden], the
    fused gate_up output [T, 2*I/tp] and the activated product [T, I/tp]; earlier layers' buffers are
    freed by then. The sampler's logits are gathered to full vocabulary. Check: Llama-3-8B, T=8192,
    256 rows -> 0.78 + 0.37 = 1.15 GiB; vLLM logged 1.26 GiB on an H100 (vllm-project/vllm #10511).
    """
    m, e = scenario.model, scenario.engine
    tokens = e.max_num_batched_tokens
    mlp = forward_peak_bytes(scenario, tokens)
    sampler = min(e.max_num_seqs, tokens) * m.vocab_size * 4 * SAMPLER_FP32_COPIES
    return mlp, sampler


def non_torch_bytes(tensor_parallel_size: int) -> int:
    return NON_TORCH_BYTES_TP1 + (NCCL_BYTES_PER_GPU if tensor_parallel_size > 1 else 0)


def cudagraph_capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """vLLM's default capture sizes (CompilationConfig): 1, 2, 4, then every 8 below 256, then every 16, up
    to min(2 x max_num_seqs, 512, max_num_batched_tokens); largest first, as the dispatcher lists them."""
    largest = min(2 * max_num_seqs, MAX_CUDA_GRAPH_CAPTURE_SIZE, max_num_batched_tokens)
    sizes = [1, 2, 4, *range(8, 256, 8), *range(256, MAX_CUDA_GRAPH_CAPTURE_SIZE + 1, 16)]
    return sorted((n for n in sizes if n <= largest), reverse=True)


def cuda_graph_bytes(scenario: Scenario) -> int:
    """vLLM's estimate of the CUDA graphs' memory (`GPUModelRunner.profile_cudagraph_memory`, v0.21+), modelled:
    PIECEWISE graphs at every capture size, FULL graphs of pure-decode batches up to max_num_seqs; the first
    capture holds the forward's activations at the largest size (the MLP peak, no sampler), every further graph
    costs CUDA_GRAPH_BYTES_PER_LAYER per layer."""
    m, e = scenario.model, scenario.engine
    if e.enforce_eager:
        return 0
    piecewise = cudagraph_capture_sizes(e.max_num_seqs, e.max_num_batched_tokens)
    full = [n for n in piecewise if n <= e.max_num_seqs]
    if not piecewise:
        return 0
    first = forward_peak_bytes(scenario, piecewise[0])
    per_graph = CUDA_GRAPH_BYTES_PER_LAYER * m.num_hidden_layers
    return first + per_graph * (len(piecewise) - 1 + max(len(full) - 1, 0))


def memory_breakdown(scenario: Scenario) -> MemoryBreakdown:
    gpu, e = scenario.hardware.gpu, scenario.engine
    usable = ceil(gpu.memory_bytes * e.gpu_memory_utilization)  # vLLM's request_memory rounds up
    weights = weights_bytes(scenario)
    mlp, sampler = activation_bytes(scenario)
    non_torch = non_torch_bytes(scenario.hardware.tensor_parallel_size)
    graphs = cuda_graph_bytes(scenario)
    per_token = kv_bytes_per_token(scenario)
    _, groups, sliding = kv_cache_groups(scenario)
    block = per_token * e.block_size
    kv_cache = usable - weights - mlp - sampler - non_torch - graphs
    num_blocks = max(0, kv_cache) // block
    if e.num_gpu_blocks_override is not None:
        # vLLM's override sets the pool (kv_cache_config.num_blocks, `may_override_num_blocks`), whose blocks
        # are one layer slot of one group: its "GPU KV cache size" counts num_blocks // groups (as here)
        num_blocks = e.num_gpu_blocks_override // groups
    return MemoryBreakdown(
        total_bytes=gpu.memory_bytes,
        usable_bytes=usable,
        weights_bytes=weights,
        kv_bytes_per_token=per_token,
        block_bytes=block,
        activation_bytes=mlp + sampler,
        activation_mlp_bytes=mlp,
        activation_sampler_bytes=sampler,
        non_torch_bytes=non_torch,
        cuda_graph_bytes=graphs,
        kv_cache_bytes=kv_cache,
        num_gpu_blocks=num_blocks,
        max_kv_tokens=num_blocks * e.block_size,
        max_model_len=scenario.max_model_len,
        block_size=e.block_size,
        kv_cache_groups=groups,
        sliding_groups=sliding,
        sliding_window_blocks=sliding_window_blocks(scenario),
    )


def tensor_parallel_sizes(num_heads: int, num_kv_heads: int, limit: int = 16) -> list[int]:
    """Sizes vLLM accepts for this model: they divide the attention heads, and either divide the KV heads
    or are a multiple of them (the KV heads are then replicated)."""
    return [
        tp for tp in range(1, limit + 1) if num_heads % tp == 0 and (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)
    ]


def tensor_parallel_that_fits(scenario: Scenario, mem: MemoryBreakdown) -> int | None:
    """The smallest valid tensor parallel size (up to 16) whose per-GPU share of the weights and of one
    request of max_model_len, plus NCCL's buffers, fits. The activation peak is kept as it is (its MLP part
    shrinks with more GPUs, so this errs towards more GPUs)."""
    tp_now, m = scenario.hardware.tensor_parallel_size, scenario.model
    kv_request = mem.kv_bytes_per_token * mem.max_model_len  # one request, on one GPU now
    kv_shards = not m.is_mla  # MLA's latent is replicated on every rank: more GPUs do not shrink it
    fixed = mem.activation_bytes + mem.cuda_graph_bytes + non_torch_bytes(2)
    for tp in tensor_parallel_sizes(m.num_attention_heads, m.num_key_value_heads):
        kv = kv_request * tp_now / tp if kv_shards else kv_request
        if tp <= tp_now:
            continue
        # at tp (the weights' split is recomputed: under expert parallel it stops shrinking once every rank
        # holds one expert)
        weights = weights_bytes(replace(scenario, hardware=replace(scenario.hardware, tensor_parallel_size=tp)))
        if weights + kv + fixed < mem.usable_bytes:
            return tp
    return None


def _more_gpus(scenario: Scenario, mem: MemoryBreakdown) -> str:
    tp = tensor_parallel_that_fits(scenario, mem)
    if tp is not None:
        return f"hardware.tensor_parallel_size {tp}"
    sizes = tensor_parallel_sizes(scenario.model.num_attention_heads, scenario.model.num_key_value_heads)
    return f"more GPUs than the tensor parallel sizes up to 16 that this model allows ({', '.join(map(str, sizes))})"


def fit_problems(scenario: Scenario, mem: MemoryBreakdown) -> list[str]:
    """Why a deployment cannot start, with the numbers that prove it and what to change (empty: fits).

    A request's blocks come from num_gpu_blocks - 1: block 0 is vLLM's null block."""
    blocks_per_request = -(-mem.max_model_len // mem.block_size)
    usable_tokens = mem.num_usable_blocks * mem.block_size
    e = scenario.engine
    hybrid = mem.sliding_groups and e.kv_cache == "paged" and e.scheduler == "continuous"
    if e.num_gpu_blocks_override is not None and hybrid:  # the override is the pool (sim/kv_groups.py)
        need, detail, _ = _hybrid_request_blocks(mem, e.num_gpu_blocks_override - 1)
        if need >= e.num_gpu_blocks_override:
            return [
                (
                    f"engine.num_gpu_blocks_override {e.num_gpu_blocks_override} blocks of one layer slot (one is"
                    f" vLLM's null block) cannot hold one request of max_model_len {mem.max_model_len}, which needs"
                    f" {need} ({detail}); raise it to at least {need + 1} or lower engine.max_model_len"
                )
            ]
        return []
    if e.num_gpu_blocks_override is not None:
        if usable_tokens < mem.max_model_len:
            return [
                (
                    f"engine.num_gpu_blocks_override {mem.num_gpu_blocks} blocks (one is vLLM's null block) x"
                    f" {mem.block_size} = {usable_tokens} tokens cannot hold one request of max_model_len"
                    f" {mem.max_model_len}; raise it to at least {blocks_per_request + 1} or lower engine.max_model_len"
                )
            ]
        return []
    if mem.kv_cache_bytes > 0 and mem.num_gpu_blocks <= 1:  # memory is left, but not for a usable block
        return [
            (
                f"the {mem.kv_cache_bytes / GIB:.2f} GiB left for the KV cache per GPU is less than two blocks of"
                f" {mem.block_size} tokens ({mem.block_bytes / GIB:.2f} GiB each; one is vLLM's null block); lower"
                f" engine.block_size, raise engine.gpu_memory_utilization or use a larger GPU or"
                f" {_more_gpus(scenario, mem)}"
            )
        ]
    if mem.kv_cache_bytes <= 0:
        fixed = mem.weights_bytes + mem.activation_bytes + mem.non_torch_bytes + mem.cuda_graph_bytes
        short = fixed - mem.usable_bytes
        graphs = f", CUDA graphs ({mem.cuda_graph_bytes / GIB:.2f} GiB)" if mem.cuda_graph_bytes else ""
        return [
            (
                f"the weights ({mem.weights_bytes / GIB:.2f} GiB), activations ({mem.activation_bytes / GIB:.2f} GiB)"
                f"{graphs} and non-torch memory ({mem.non_torch_bytes / GIB:.2f} GiB) need more than the usable"
                f" {mem.usable_bytes / GIB:.2f} GiB per GPU (short by {max(short, 0) / GIB:.2f} GiB) and leave no KV"
                f" blocks; use a larger GPU or {_more_gpus(scenario, mem)} (or a higher"
                " engine.gpu_memory_utilization or a lower engine.max_num_batched_tokens, if that is enough)"
            )
        ]
    if hybrid:  # vLLM's hybrid allocator (sim/kv_groups.py): a sliding group holds at most its window's blocks
        return _hybrid_fit_problems(scenario, mem)
    if usable_tokens < mem.max_model_len:
        return [
            (
                f"max_model_len {mem.max_model_len} is longer than the KV pool holds ({mem.num_usable_blocks} blocks"
                f" besides vLLM's null block x {mem.block_size} = {usable_tokens} tokens); set engine.max_model_len <="
                f" {usable_tokens}, or use {_more_gpus(scenario, mem)} or a larger GPU"
            )
        ]
    return []


def _hybrid_request_blocks(mem: MemoryBreakdown, pool: int) -> tuple[int, str, int]:
    """(blocks of one layer slot a request of max_model_len holds at most, how they split over the groups, the
    most blocks per full-attention group a request can have within `pool` blocks). vLLM's
    `check_enough_kv_cache_memory` sums each layer's `max_memory_usage_bytes`: ceil(L / block_size) blocks in
    a full-attention layer, at most sliding_window_blocks in a sliding one."""
    full, sliding, window = mem.kv_cache_groups - mem.sliding_groups, mem.sliding_groups, mem.sliding_window_blocks
    blocks = -(-mem.max_model_len // mem.block_size)
    need = full * blocks + sliding * min(blocks, window)
    detail = f"{full} full-attention group(s) x {blocks} + {sliding} sliding-window group(s) x {min(blocks, window)}"
    # the longest request that fits: b blocks with full * b + sliding * min(b, window) <= pool
    fits = (pool - sliding * window) // full if full and pool >= (full + sliding) * window else pool // (full + sliding)
    return need, detail, fits


def _hybrid_fit_problems(scenario: Scenario, mem: MemoryBreakdown) -> list[str]:
    """One request of max_model_len must fit the pool of num_gpu_blocks x groups blocks of one layer slot
    (sim/kv_groups.py), the null block aside."""
    pool = mem.num_gpu_blocks * mem.kv_cache_groups - 1
    need, detail, fits = _hybrid_request_blocks(mem, pool)
    if need <= pool:
        return []
    return [
        (
            f"max_model_len {mem.max_model_len} needs {need} KV blocks of one layer slot ({detail}) and the pool has"
            f" {pool} besides vLLM's null block; set engine.max_model_len <= {fits * mem.block_size}, or use"
            f" {_more_gpus(scenario, mem)} or a larger GPU"
        )
    ]
