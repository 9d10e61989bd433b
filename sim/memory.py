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
A speculative engine's drafter (EAGLE head, MTP layers, draft model) is loaded before the profiling and its attention
layers join the KV cache config: its weights come out of the memory and its layers' KV joins every block.
The weights and the KV page sizes are the engine's facts (sim/engine_facts.py, derived once from sim/weights.py
and sim/kv_sizing.py); whether the breakdown leaves room for a request is sim/memory_fit.py's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import ceil

from sim.engine_facts import MAX_CUDA_GRAPH_CAPTURE_SIZE, EngineFacts

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
    # Speculative decoding's drafter (sim/draft_model.py): its weights beside the target's, and its layers' share of
    # kv_bytes_per_token (vLLM registers the drafter's attention layers in the same KV cache config, so a block
    # holds every layer of both). 0 without a drafter model, and left out of to_dict then.
    draft_weights_bytes: int = 0
    draft_kv_bytes_per_token: int = 0

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
        out = asdict(self) | {"max_concurrency_at_max_len": self.max_concurrency_at_max_len}
        for key in ("draft_weights_bytes", "draft_kv_bytes_per_token"):
            if not out[key]:
                del out[key]  # a summary without speculative decoding keeps the keys it always had
        return out


# vLLM's fused MoE processes at most this many tokens at once (VLLM_FUSED_MOE_CHUNK_SIZE, vllm/envs.py: 16 * 1024
# in current releases; it was 32 * 1024 earlier). Matters only for a token budget above it.
FUSED_MOE_CHUNK_TOKENS = 16384


def forward_peak_bytes(facts: EngineFacts, tokens: int) -> int:
    """The forward's peak for `tokens` tokens, inside the MLP of a layer (see activation_bytes).

    Dense MLP: the residual and the normed input [T, hidden], the fused gate_up output [T, 2*I/tp] and the
    activated product [T, I/tp]. MoE layer, as vLLM's `fused_experts_impl` allocates its workspaces for
    M = min(T, chunk) tokens: cache13 [M, top_k, max(2*I/tp, hidden)] (gate_up output and the experts' down
    output share it), cache2 [M * top_k, I/tp], plus the residual, the normed input, the layer's output
    [T, hidden] and the router's float32 logits [T, experts]. Under expert parallel (tensor parallel 1 for
    the experts) I is the whole expert's width: without data parallel every rank gets every token and the
    workspaces are sized for all M x top_k routed rows, those of other ranks' experts skipped (expert_map -1)."""
    m, tp, dtype = facts.model, facts.tensor_parallel_size, facts.dtype_bytes
    peak = 0
    if m.num_dense_mlp_layers:
        peak = tokens * dtype * (2 * m.hidden_size + 3 * m.intermediate_size // tp)
    if m.num_moe_layers:
        width, k = m.moe_intermediate_size // facts.expert_tensor_parallel_size, m.num_experts_per_tok
        chunk = min(tokens, FUSED_MOE_CHUNK_TOKENS)
        workspace = chunk * k * (max(2 * width, m.hidden_size) + width) * dtype
        moe = tokens * dtype * 3 * m.hidden_size + workspace + tokens * m.num_experts * 4
        moe += tokens * dtype * 3 * m.shared_expert_intermediate_size // tp  # shared experts' gate_up and act
        peak = max(peak, moe)
    return peak


def activation_bytes(facts: EngineFacts) -> tuple[int, int]:
    """(mlp_peak, sampler) bytes of the profiling run's peak.

    The forward's peak is inside the MLP of a layer: the residual and the normed input [T, hidden], the
    fused gate_up output [T, 2*I/tp] and the activated product [T, I/tp]; earlier layers' buffers are
    freed by then. The sampler's logits are gathered to full vocabulary. Check: Llama-3-8B, T=8192,
    256 rows -> 0.78 + 0.37 = 1.15 GiB; vLLM logged 1.26 GiB on an H100 (vllm-project/vllm #10511).
    """
    m, e = facts.model, facts.engine
    tokens = e.max_num_batched_tokens
    mlp = forward_peak_bytes(facts, tokens)
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


def cuda_graph_bytes(facts: EngineFacts) -> int:
    """vLLM's estimate of the CUDA graphs' memory (`GPUModelRunner.profile_cudagraph_memory`, v0.21+), modelled:
    PIECEWISE graphs at every capture size, FULL graphs of pure-decode batches up to max_num_seqs; the first
    capture holds the forward's activations at the largest size (the MLP peak, no sampler), every further graph
    costs CUDA_GRAPH_BYTES_PER_LAYER per layer."""
    m, e = facts.model, facts.engine
    if facts.eager:  # enforce_eager, or the host itself: no graphs
        return 0
    piecewise = cudagraph_capture_sizes(e.max_num_seqs, e.max_num_batched_tokens)
    full = [n for n in piecewise if n <= e.max_num_seqs]
    if not piecewise:
        return 0
    first = forward_peak_bytes(facts, piecewise[0])
    per_graph = CUDA_GRAPH_BYTES_PER_LAYER * m.num_hidden_layers
    return first + per_graph * (len(piecewise) - 1 + max(len(full) - 1, 0))


def memory_breakdown(facts: EngineFacts) -> MemoryBreakdown:
    """What vLLM's start-up profiling finds on each GPU of the engine (module docstring)."""
    gpu, e = facts.gpu, facts.engine
    usable = ceil(gpu.memory_bytes * e.gpu_memory_utilization)  # vLLM's request_memory rounds up
    weights = facts.weights_bytes
    mlp, sampler = activation_bytes(facts)
    non_torch = non_torch_bytes(facts.tensor_parallel_size)
    graphs = cuda_graph_bytes(facts)
    draft_per_token = facts.draft.kv_bytes_per_token if facts.draft is not None else 0
    per_token, groups = facts.kv_bytes_per_token + draft_per_token, facts.kv_cache_groups
    block = per_token * e.block_size
    kv_cache = usable - weights - facts.draft_weights_bytes - mlp - sampler - non_torch - graphs
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
        max_model_len=facts.max_model_len,
        block_size=e.block_size,
        kv_cache_groups=groups,
        sliding_groups=facts.sliding_groups,
        sliding_window_blocks=facts.sliding_window_blocks,
        draft_weights_bytes=facts.draft_weights_bytes,
        draft_kv_bytes_per_token=draft_per_token,
    )
