"""Paged attention for mixed decode / chunked-prefill batches (layout after vLLM's unified Triton
attention).

One program handles BLOCK_Q query tokens of one sequence times all NUM_QUERIES_PER_KV query heads
that share one KV head: BLOCK_M = BLOCK_Q * NUM_QUERIES_PER_KV rows. So each K/V tile is read once
per KV head (GQA), and a decode step is a [BLOCK_M, head_dim] x [head_dim, TILE_N] tensor-core dot
rather than a matrix-vector product. The KV loop walks the context in TILE_N-token tiles, looking
each token's block up in the block table, so tiles may span cache blocks of any size.

Grid: (query blocks, KV heads, KV splits). Query blocks are numbered without a host sync: sequence
i's first block is query_start_loc[i] // BLOCK_Q + i, so num_tokens // BLOCK_Q + num_seqs blocks
cover every sequence; a program finds its sequence by binary search and surplus programs exit.
Decode batches too small to fill the GPU split each context into num_splits ranges (flash-decoding);
each split writes an unnormalised partial (acc, max, sum) and a second kernel merges them.

A sliding window (Mistral v0.1, gpt-oss and Gemma's local layers) masks keys older than the window and
starts the KV loop at the tile of the first key any row of the program sees.

No recompilation once a run is warm: the ints that change from step to step (num_seqs, the block
table's width, num_splits) are not specialised on, the cache block size is a constexpr (fixed per
run), and a launch picks one of three compiled variants: decode, decode with splits, prefill (a
larger BLOCK_M, so a long chunk's K/V is read far fewer times).
"""

import torch
import triton
import triton.language as tl

from planner_kernels.paged_attention_config import INTERPRETING, MAX_SPLITS, _choose_num_splits, _config

LOG2_E = 1.4426950408889634


@triton.jit
def _find_seq_idx(
    query_start_loc_ptr,  # [num_seqs + 1]
    q_block,
    num_seqs,
    BLOCK_Q: tl.constexpr,
):
    """Largest sequence index i with query_start_loc[i] // BLOCK_Q + i <= q_block."""
    left = 0
    right = num_seqs
    while left < right:
        mid = (left + right) // 2
        mid_first_block = tl.load(query_start_loc_ptr + mid) // BLOCK_Q + mid
        if mid_first_block <= q_block:
            left = mid + 1
        else:
            right = mid
    return left - 1


@triton.jit(do_not_specialize=["num_seqs", "num_splits", "stride_bt"])  # they change every step
def _paged_attention_kernel(
    out_ptr,  # [num_tokens, num_heads, head_dim], or [num_tokens, num_heads, num_splits, head_dim] fp32
    m_ptr,  # [num_tokens, num_heads, num_splits] fp32, running max (log2 domain); split path only
    l_ptr,  # [num_tokens, num_heads, num_splits] fp32, running sum of exponentials; split path only
    query_ptr,  # [num_tokens, num_heads, head_dim]
    k_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache_ptr,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables_ptr,  # [num_seqs, max_blocks_per_seq]
    seq_lens_ptr,  # [num_seqs]
    query_start_loc_ptr,  # [num_seqs + 1]
    qk_scale,  # softmax scale * log2(e): the kernel works with exp2
    num_seqs,
    num_splits,  # programs along grid axis 2, each over a contiguous range of KV tiles
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_cb,
    stride_ct,
    stride_ch,
    stride_bt,
    BLOCK_SIZE: tl.constexpr,  # cache block size, fixed per run: the division becomes a shift
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,  # next power of two >= max(HEAD_DIM, 16)
    NUM_QUERIES_PER_KV: tl.constexpr,
    BLOCK_Q: tl.constexpr,  # query tokens per program
    BLOCK_M: tl.constexpr,  # rows per program, power of two >= BLOCK_Q * NUM_QUERIES_PER_KV
    TILE_N: tl.constexpr,  # context tokens per KV-loop iteration
    SPLIT: tl.constexpr,  # write partials for _merge_splits_kernel (num_splits > 1)
    FP32_DOT: tl.constexpr,  # dots in full fp32 (fp32 inputs: not tf32; see _fp32_dot)
    SLIDING_WINDOW: tl.constexpr,  # keys a query attends to, itself included; 0: no window
):
    q_block = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    seq = _find_seq_idx(query_start_loc_ptr, q_block, num_seqs, BLOCK_Q)
    q_seq_start = tl.load(query_start_loc_ptr + seq)
    q_len = tl.load(query_start_loc_ptr + seq + 1) - q_seq_start
    q_first = (q_block - (q_seq_start // BLOCK_Q + seq)) * BLOCK_Q  # first query row in the seq
    if q_first >= q_len:
        return
    context_len = tl.load(seq_lens_ptr + seq) - q_len  # tokens before this step's queries

    rows = tl.arange(0, BLOCK_M)
    q_idx = q_first + rows // NUM_QUERIES_PER_KV  # query token within the sequence
    head = kv_head * NUM_QUERIES_PER_KV + rows % NUM_QUERIES_PER_KV
    row_ok = (q_idx < q_len) & (rows < BLOCK_Q * NUM_QUERIES_PER_KV)
    q_pos = context_len + q_idx  # causal: row sees context positions 0..q_pos
    token = (q_seq_start + q_idx).to(tl.int64)
    d = tl.arange(0, HEAD_DIM_PADDED)
    d_ok = d < HEAD_DIM
    q = tl.load(
        query_ptr + token[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :],
        mask=row_ok[:, None] & d_ok[None, :],
        other=0.0,
    )

    kv_end = context_len + tl.minimum(q_first + BLOCK_Q, q_len)  # positions any row may see
    if SLIDING_WINDOW > 0:
        # the first row's window starts here; the KV loop starts at its tile, so the blocks before it (the
        # null block once the scheduler freed them, sim/kv_groups.py) are never read
        kv_start = tl.maximum(context_len + q_first - SLIDING_WINDOW + 1, 0)
    else:
        kv_start = 0
    tile_first = kv_start // TILE_N
    num_tiles = tl.cdiv(kv_end, TILE_N) - tile_first
    tiles_per_split = tl.cdiv(num_tiles, num_splits)
    tile_lo = tile_first + split * tiles_per_split
    tile_hi = tl.minimum(tile_lo + tiles_per_split, tile_first + num_tiles)

    M = tl.full([BLOCK_M], float("-inf"), tl.float32)
    L = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PADDED], tl.float32)
    block_table_ptr = block_tables_ptr + seq.to(tl.int64) * stride_bt
    kv_head_offset = kv_head.to(tl.int64) * stride_ch
    n = tl.arange(0, TILE_N)
    for tile in range(tile_lo, tile_hi):
        kv_pos = tile * TILE_N + n
        kv_ok = (kv_pos < kv_end) & (kv_pos >= kv_start)
        # int64 (every product with a stride): block * stride_cb overflows int32 once the cache passes 2^31
        # elements; gpu_engine.compile_check fails any 32-bit stride product on a cache pointer
        block = tl.load(block_table_ptr + kv_pos // BLOCK_SIZE, mask=kv_ok, other=0).to(tl.int64)
        slot = block * stride_cb + (kv_pos % BLOCK_SIZE).to(tl.int64) * stride_ct + kv_head_offset
        k = tl.load(
            k_cache_ptr + slot[None, :] + d[:, None],
            mask=kv_ok[None, :] & d_ok[:, None],
            other=0.0,
        )  # [HEAD_DIM_PADDED, TILE_N]
        v = tl.load(
            v_cache_ptr + slot[:, None] + d[None, :],
            mask=kv_ok[:, None] & d_ok[None, :],
            other=0.0,
        )  # [TILE_N, HEAD_DIM_PADDED]
        if FP32_DOT:
            s = tl.dot(q.to(tl.float32), k.to(tl.float32), input_precision="ieee")
        else:
            s = tl.dot(q, k)
        seen = kv_pos[None, :] <= q_pos[:, None]  # causal
        if SLIDING_WINDOW > 0:
            seen = seen & (q_pos[:, None] - kv_pos[None, :] < SLIDING_WINDOW)
        s = tl.where(seen, s * qk_scale, float("-inf"))
        m_new = tl.maximum(M, tl.max(s, axis=1))
        m_new = tl.where(m_new > float("-inf"), m_new, 0.0)  # a fully masked row: keep P = 0
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(M - m_new)
        L = L * alpha + tl.sum(p, axis=1)
        if FP32_DOT:
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32), input_precision="ieee")
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        M = m_new

    if not SPLIT:
        out_offs = token[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
        if SLIDING_WINDOW > 0:  # a padding row past the query may see no key: 0 / 0 (its store is masked)
            L = tl.where(row_ok, L, 1.0)
        out = acc / L[:, None]
        tl.store(out_ptr + out_offs, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & d_ok[None, :])
    else:
        part = (token * (tl.num_programs(1) * NUM_QUERIES_PER_KV) + head) * num_splits + split
        tl.store(m_ptr + part, M, mask=row_ok)
        tl.store(l_ptr + part, L, mask=row_ok)
        tl.store(out_ptr + part[:, None] * HEAD_DIM + d[None, :], acc, mask=row_ok[:, None] & d_ok[None, :])


@triton.jit(do_not_specialize=["num_splits"])
def _merge_splits_kernel(
    out_ptr,  # [num_tokens, num_heads, head_dim]
    acc_ptr,  # [num_tokens, num_heads, num_splits, head_dim] fp32
    m_ptr,  # [num_tokens, num_heads, num_splits] fp32
    l_ptr,  # [num_tokens, num_heads, num_splits] fp32
    num_splits,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PADDED: tl.constexpr,
    MAX_SPLITS: tl.constexpr,  # power of two >= num_splits
):
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    splits = tl.arange(0, MAX_SPLITS)
    part = (token * tl.num_programs(1) + head) * num_splits + splits
    split_ok = splits < num_splits
    sums = tl.load(l_ptr + part, mask=split_ok, other=0.0)
    maxes = tl.load(m_ptr + part, mask=split_ok, other=float("-inf"))
    maxes = tl.where(sums > 0.0, maxes, float("-inf"))  # a split that saw nothing has no weight
    weight = tl.exp2(maxes - tl.max(maxes, axis=0))
    d = tl.arange(0, HEAD_DIM_PADDED)
    d_ok = d < HEAD_DIM
    acc = tl.load(acc_ptr + part[:, None] * HEAD_DIM + d[None, :], mask=split_ok[:, None] & d_ok[None, :], other=0.0)
    out = tl.sum(acc * weight[:, None], axis=0) / tl.sum(sums * weight, axis=0)
    tl.store(out_ptr + token * stride_ot + head * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=d_ok)


def _fp32_dot(dtype: torch.dtype) -> bool:
    """fp32 inputs get ieee fp32 dots (tf32 would miss fp32 tolerances). So does bf16 under the
    CPU interpreter, whose tl.dot multiplies bf16 as raw uint16 integers (triton 3.9); on GPU,
    bf16 dots run on tensor cores with fp32 accumulation like fp16."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and INTERPRETING)


def _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, query_start_loc) -> None:
    if query.dim() != 3 or k_cache.dim() != 4:
        raise ValueError(
            f"want query [num_tokens, num_heads, head_dim] and k_cache [num_blocks, block_size, "
            f"num_kv_heads, head_dim], got {tuple(query.shape)} and {tuple(k_cache.shape)}"
        )
    if k_cache.shape != v_cache.shape or k_cache.stride() != v_cache.stride():
        raise ValueError(f"k_cache and v_cache differ in shape or strides: {k_cache.shape} vs {v_cache.shape}")
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError(f"query dtype {query.dtype} not supported (fp16, bf16, fp32)")
    if not query.dtype == k_cache.dtype == v_cache.dtype:
        raise TypeError(f"query, k_cache, v_cache dtypes differ: {query.dtype}, {k_cache.dtype}, {v_cache.dtype}")
    num_heads, head_dim = query.shape[1:]
    num_kv_heads = k_cache.shape[2]
    if k_cache.shape[3] != head_dim:
        raise ValueError(f"head_dim: query has {head_dim}, cache has {k_cache.shape[3]}")
    if num_heads % num_kv_heads:
        raise ValueError(f"num_heads={num_heads} is not a multiple of num_kv_heads={num_kv_heads}")
    if query.stride(2) != 1 or k_cache.stride(3) != 1:
        raise ValueError("query and the caches need a contiguous head_dim (stride 1)")
    num_seqs = seq_lens.shape[0]
    for name, t, shape in (
        ("block_tables", block_tables, (num_seqs, block_tables.shape[-1])),
        ("seq_lens", seq_lens, (num_seqs,)),
        ("query_start_loc", query_start_loc, (num_seqs + 1,)),
    ):
        if t.dtype not in (torch.int32, torch.int64) or tuple(t.shape) != shape:
            raise ValueError(f"{name}: want int32 {shape}, got {t.dtype} {tuple(t.shape)}")
    if block_tables.stride(1) != 1:
        raise ValueError("block_tables needs stride 1 along its last dim")
    devices = {t.device for t in (query, k_cache, v_cache, block_tables, seq_lens, query_start_loc)}
    if len(devices) != 1:
        raise ValueError(f"all inputs must be on one device, got {devices}")


def _launch(
    query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, num_splits, config, sliding_window=0
):
    num_tokens, num_heads, head_dim = query.shape
    block_size, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    num_seqs = seq_lens.shape[0]
    queries_per_kv = num_heads // num_kv_heads
    block_m = max(16, config.block_m, triton.next_power_of_2(queries_per_kv))  # tl.dot wants >= 16 rows
    block_q = block_m // queries_per_kv
    head_dim_padded = max(16, triton.next_power_of_2(head_dim))
    if not 1 <= num_splits <= MAX_SPLITS:
        raise ValueError(f"num_splits={num_splits}: want 1..{MAX_SPLITS}")
    out = torch.empty_like(query)
    if num_tokens == 0 or num_seqs == 0:
        return out
    if num_splits == 1:
        part_acc, part_m, part_l = out, out, out  # m/l unused without splits
        stride_ot, stride_oh = out.stride(0), out.stride(1)
    else:
        part_m = torch.empty(num_tokens, num_heads, num_splits, dtype=torch.float32, device=query.device)
        part_l = torch.empty_like(part_m)
        part_acc = torch.empty(num_tokens, num_heads, num_splits, head_dim, dtype=torch.float32, device=query.device)
        stride_ot, stride_oh = 0, 0  # partials are addressed as contiguous
    grid = (num_tokens // block_q + num_seqs, num_kv_heads, num_splits)
    _paged_attention_kernel[grid](
        part_acc, part_m, part_l, query, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
        scale * LOG2_E, num_seqs, num_splits,
        query.stride(0), query.stride(1), stride_ot, stride_oh,
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_tables.stride(0),
        BLOCK_SIZE=block_size, HEAD_DIM=head_dim, HEAD_DIM_PADDED=head_dim_padded,
        NUM_QUERIES_PER_KV=queries_per_kv, BLOCK_Q=block_q, BLOCK_M=block_m, TILE_N=config.tile_n,
        SPLIT=num_splits > 1, FP32_DOT=_fp32_dot(query.dtype), SLIDING_WINDOW=sliding_window,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )  # fmt: skip
    if num_splits > 1:
        _merge_splits_kernel[(num_tokens, num_heads)](
            out, part_acc, part_m, part_l, num_splits, out.stride(0), out.stride(1),
            HEAD_DIM=head_dim, HEAD_DIM_PADDED=head_dim_padded, MAX_SPLITS=MAX_SPLITS, num_warps=4,
        )  # fmt: skip
    return out


def compile_split_path(num_heads: int, k_cache: torch.Tensor, v_cache: torch.Tensor, sliding_window: int = 0) -> None:
    """Launch the split-context decode variant and the merge kernel once (one query over cache block 0,
    writing nothing to the cache), so that they compile at start-up rather than in the middle of a timed
    run, when the first long-context decode batch asks for splits. Warm-up's short requests never do.
    sliding_window: the model's (a window is a compile-time constant of the kernel)."""
    ints = {"dtype": torch.int32, "device": k_cache.device}
    query = torch.zeros(1, num_heads, k_cache.shape[3], dtype=k_cache.dtype, device=k_cache.device)
    block_tables, seq_lens, query_start_loc = torch.zeros(1, 1, **ints), torch.ones(1, **ints), torch.arange(2, **ints)
    config = _config(True, k_cache.dtype, k_cache.shape[3], k_cache.device)
    _launch(query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, 1.0, 2, config, sliding_window)


def paged_attention(
    query: torch.Tensor,  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor,  # [num_blocks, block_size, num_kv_heads, head_dim]
    block_tables: torch.Tensor,  # [num_seqs, max_blocks_per_seq] int32
    seq_lens: torch.Tensor,  # [num_seqs] int32, context length including the query tokens
    query_start_loc: torch.Tensor,  # [num_seqs + 1] int32
    scale: float,
    max_query_len: int | None = None,
    check: bool = True,
    sliding_window: int = 0,
) -> torch.Tensor:  # [num_tokens, num_heads, head_dim]
    """Same semantics as reference.paged_attention_ref; no host sync.

    max_query_len is only a performance hint (1 selects the decode config and its split-context path,
    more the prefill config); when None, a batch with one token per sequence is taken as decode.
    Output rows of tokens past query_start_loc[-1] (padding) are left undefined.
    check=False skips the input checks: for callers that checked the same shapes once (the engine checks
    its first layer each step; the other layers have the same shapes, dtypes and devices).
    sliding_window > 0: a query at position p sees keys p - sliding_window + 1 .. p; the KV loop starts at
    the tile of the first one, so blocks before the window (vLLM frees them) are never read. A compile-time
    constant: one variant per window a model has.
    """
    if check:
        _check_inputs(query, k_cache, v_cache, block_tables, seq_lens, query_start_loc)
        if sliding_window < 0:
            raise ValueError(f"sliding_window={sliding_window}: want 0 (no window) or the window's length in tokens")
    num_seqs = seq_lens.shape[0]
    decode = max_query_len == 1 if max_query_len is not None else query.shape[0] == num_seqs
    config = _config(decode, query.dtype, query.shape[2], query.device)
    num_splits = _choose_num_splits(query, k_cache, block_tables, num_seqs, decode, config.tile_n, sliding_window)
    return _launch(
        query, k_cache, v_cache, block_tables, seq_lens, query_start_loc, scale, num_splits, config, sliding_window
    )
