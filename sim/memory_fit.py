"""Whether an engine can start: why its memory breakdown does not fit, with the numbers that prove it and
what to change (`fit_problems`), and the tensor parallel sizes vLLM accepts for a model."""

from __future__ import annotations

from dataclasses import replace

from sim.engine_facts import EngineFacts
from sim.memory import GIB, MemoryBreakdown, non_torch_bytes


def tensor_parallel_sizes(num_heads: int, num_kv_heads: int, limit: int = 16) -> list[int]:
    """Sizes vLLM accepts for this model: they divide the attention heads, and either divide the KV heads
    or are a multiple of them (the KV heads are then replicated)."""
    return [
        tp for tp in range(1, limit + 1) if num_heads % tp == 0 and (num_kv_heads % tp == 0 or tp % num_kv_heads == 0)
    ]


def tensor_parallel_that_fits(facts: EngineFacts, mem: MemoryBreakdown) -> int | None:
    """The smallest valid tensor parallel size (up to 16) whose per-GPU share of the weights and of one
    request of max_model_len, plus NCCL's buffers, fits. The activation peak is kept as it is (its MLP part
    shrinks with more GPUs, so this errs towards more GPUs)."""
    m = facts.model
    fixed = mem.activation_bytes + mem.cuda_graph_bytes + non_torch_bytes(2)
    for tp in tensor_parallel_sizes(m.num_attention_heads, m.num_key_value_heads):
        if tp <= facts.tensor_parallel_size:
            continue
        # The engine at tp: the weights' split (under expert parallel it stops shrinking once every rank holds
        # one expert) and one request's KV (MLA's latent, and KV heads fewer than the ranks, are replicated).
        at = EngineFacts.derive(m, facts.dtype, replace(facts.hardware, tensor_parallel_size=tp), facts.engine)
        if at.weights_bytes + at.kv_bytes_per_token * mem.max_model_len + fixed < mem.usable_bytes:
            return tp
    return None


def _more_gpus(facts: EngineFacts, mem: MemoryBreakdown) -> str:
    tp = tensor_parallel_that_fits(facts, mem)
    if tp is not None:
        if facts.gpu.interconnect_bandwidth_gbps is None:  # else that advice is refused for the field
            return f"hardware.tensor_parallel_size {tp} (with the GPU's interconnect_bandwidth_gbps, which it lacks)"
        return f"hardware.tensor_parallel_size {tp}"
    sizes = tensor_parallel_sizes(facts.model.num_attention_heads, facts.model.num_key_value_heads)
    return f"more GPUs than the tensor parallel sizes up to 16 that this model allows ({', '.join(map(str, sizes))})"


def fit_problems(facts: EngineFacts, mem: MemoryBreakdown) -> list[str]:
    """Why a deployment cannot start, with the numbers that prove it and what to change (empty: fits).

    A request's blocks come from num_gpu_blocks - 1: block 0 is vLLM's null block."""
    blocks_per_request = -(-mem.max_model_len // mem.block_size)
    usable_tokens = mem.num_usable_blocks * mem.block_size
    e, hybrid = facts.engine, facts.hybrid_kv
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
        # The override counts blocks of one layer group (vLLM's pool); a block here holds every layer's K/V, so
        # num_gpu_blocks is override // groups (sim/memory.py) and the override's limits are those times groups.
        override, groups = e.num_gpu_blocks_override, mem.kv_cache_groups
        as_blocks = f"{mem.num_gpu_blocks:,} blocks of all {groups} layer groups" if groups > 1 else ""
        kv_bytes = max(mem.kv_cache_bytes, 0)
        if mem.num_gpu_blocks * mem.block_bytes > kv_bytes:
            # vLLM allocates the pool it is told to (the override replaces the profiled count): more than the
            # memory left for it fails at start-up, out of memory
            return [
                (
                    f"engine.num_gpu_blocks_override {override:,}{f' ({as_blocks})' if as_blocks else ''} x"
                    f" {mem.block_bytes / GIB:.4f} GiB ="
                    f" {mem.num_gpu_blocks * mem.block_bytes / GIB:,.2f} GiB per GPU, more than the"
                    f" {kv_bytes / GIB:.2f} GiB left for the KV cache: the engine would run out of memory allocating"
                    f" them; lower it to at most {(kv_bytes // mem.block_bytes + 1) * groups - 1:,}"
                )
            ]
        if usable_tokens < mem.max_model_len:
            return [
                (
                    f"engine.num_gpu_blocks_override {override:,} ({as_blocks + '; ' if as_blocks else ''}one is"
                    f" vLLM's null block) x {mem.block_size} = {usable_tokens:,} tokens cannot hold one request of max_model_len"
                    f" {mem.max_model_len:,}; raise it to at least {(blocks_per_request + 1) * groups:,} or lower"
                    " engine.max_model_len"
                )
            ]
        return []
    if mem.kv_cache_bytes > 0 and mem.num_gpu_blocks <= 1:  # memory is left, but not for a usable block
        return [
            (
                f"the {mem.kv_cache_bytes / GIB:.2f} GiB left for the KV cache per GPU is less than two blocks of"
                f" {mem.block_size} tokens ({mem.block_bytes / GIB:.2f} GiB each; one is vLLM's null block); lower"
                f" engine.block_size, raise engine.gpu_memory_utilization or use a larger GPU or"
                f" {_more_gpus(facts, mem)}"
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
                f" blocks; use a larger GPU or {_more_gpus(facts, mem)} (or a higher"
                " engine.gpu_memory_utilization or a lower engine.max_num_batched_tokens, if that is enough)"
            )
        ]
    if hybrid:  # vLLM's hybrid allocator (sim/kv_groups.py): a sliding group holds at most its window's blocks
        return _hybrid_fit_problems(facts, mem)
    if usable_tokens < mem.max_model_len:
        return [
            (
                f"max_model_len {mem.max_model_len} is longer than the KV pool holds ({mem.num_usable_blocks} blocks"
                f" besides vLLM's null block x {mem.block_size} = {usable_tokens} tokens); set engine.max_model_len <="
                f" {usable_tokens}, or use {_more_gpus(facts, mem)} or a larger GPU"
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


def _hybrid_fit_problems(facts: EngineFacts, mem: MemoryBreakdown) -> list[str]:
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
            f" {_more_gpus(facts, mem)} or a larger GPU"
        )
    ]
