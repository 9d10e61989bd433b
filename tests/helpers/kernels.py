"""The kernel tests share: device choice, the Triton skip, and paged-KV case builders
(dense per-sequence K/V scattered into shuffled cache blocks). Needs torch."""

import importlib.util
import sys
from dataclasses import dataclass

import pytest
import torch

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# CPU runs the interpreter (one Python-level pass per program): keep shapes small there
FULL = DEVICE == "cuda"


def require_triton() -> None:
    """Module-level skip for tests that launch Triton kernels."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed", allow_module_level=True)
    loaded = sys.modules.get("planner_kernels.store_kv")
    if DEVICE == "cpu" and loaded and type(loaded._store_kv_kernel).__name__ != "InterpretedFunction":
        # re-importing under the interpreter does not work in triton 3.9
        pytest.skip("kernels was imported before conftest set TRITON_INTERPRET=1; run "
                    "`TRITON_INTERPRET=1 python -m pytest tests/kernels`", allow_module_level=True)  # fmt: skip


@dataclass
class PagedCase:
    query: torch.Tensor  # [num_tokens, num_heads, head_dim]
    k_cache: torch.Tensor  # [num_blocks, block_size, num_kv_heads, head_dim]
    v_cache: torch.Tensor
    block_tables: torch.Tensor  # [num_seqs, max_blocks_per_seq] int32, unused entries -1
    seq_lens: torch.Tensor  # [num_seqs] int32
    query_start_loc: torch.Tensor  # [num_seqs + 1] int32
    keys: list[torch.Tensor]  # per sequence, dense [seq_len, num_kv_heads, head_dim]
    values: list[torch.Tensor]

    def args(self, scale: float) -> tuple:
        return (self.query, self.k_cache, self.v_cache, self.block_tables, self.seq_lens,
                self.query_start_loc, scale)  # fmt: skip


def make_case(
    q_and_seq_lens: list[tuple[int, int]],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    device: str,
    seed: int = 0,
    first_block: int = 0,  # put the used blocks at ids >= this (index-overflow tests)
    k_cache: torch.Tensor | None = None,  # reuse a preallocated cache (its used blocks are poisoned here)
    v_cache: torch.Tensor | None = None,
) -> PagedCase:
    gen = torch.Generator().manual_seed(seed)
    blocks_per_seq = [-(-seq_len // block_size) for _, seq_len in q_and_seq_lens]
    num_used = sum(blocks_per_seq)
    # spare blocks between used ones, shuffled: a wrong block lookup reads NaN or another seq's data
    ids = first_block + torch.randperm(2 * num_used + 1, generator=gen)[:num_used]
    if k_cache is None:
        shape = (first_block + 2 * num_used + 1, block_size, num_kv_heads, head_dim)
        k_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
        v_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
    else:
        k_cache[first_block : first_block + 2 * num_used + 1] = float("nan")
        v_cache[first_block : first_block + 2 * num_used + 1] = float("nan")
    block_tables = torch.full((len(q_and_seq_lens), max(blocks_per_seq)), -1, dtype=torch.int32)
    keys, values, queries = [], [], []
    next_id = 0
    for i, (q_len, seq_len) in enumerate(q_and_seq_lens):
        seq_ids = ids[next_id : next_id + blocks_per_seq[i]]
        next_id += blocks_per_seq[i]
        block_tables[i, : len(seq_ids)] = seq_ids.int()
        k = torch.randn(seq_len, num_kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(seq_len, num_kv_heads, head_dim, generator=gen).to(dtype)
        pos = torch.arange(seq_len)
        k_cache[seq_ids[pos // block_size].to(device), (pos % block_size).to(device)] = k.to(device)
        v_cache[seq_ids[pos // block_size].to(device), (pos % block_size).to(device)] = v.to(device)
        keys.append(k.to(device))
        values.append(v.to(device))
        queries.append(torch.randn(q_len, num_heads, head_dim, generator=gen).to(dtype))
    q_lens = torch.tensor([q for q, _ in q_and_seq_lens])
    return PagedCase(
        query=torch.cat(queries).to(device),
        k_cache=k_cache,
        v_cache=v_cache,
        block_tables=block_tables.to(device),
        seq_lens=torch.tensor([s for _, s in q_and_seq_lens], dtype=torch.int32, device=device),
        query_start_loc=torch.cat([torch.zeros(1, dtype=torch.int64), q_lens.cumsum(0)]).int().to(device),
        keys=keys,
        values=values,
    )


def free_blocks_before_window(case: PagedCase, sliding_window: int) -> PagedCase:
    """Point every block wholly before the first query's window at a NaN-filled spare block, as the scheduler
    puts the null block there once it freed them (sim/kv_groups.py): a kernel that reads one fails."""
    used = set(case.block_tables[case.block_tables >= 0].tolist())
    spare = next(b for b in range(case.k_cache.shape[0]) if b not in used)  # make_case leaves them NaN
    block_size, starts = case.k_cache.shape[1], case.query_start_loc.tolist()
    for i, seq_len in enumerate(case.seq_lens.tolist()):
        q_len = starts[i + 1] - starts[i]
        case.block_tables[i, : max(0, seq_len - q_len - sliding_window + 1) // block_size] = spare
    return case


def dense_attention(case: PagedCase, scale: float, sliding_window: int = 0) -> torch.Tensor:
    """Naive causal attention in float64 over the unpaged K/V: the oracle for the reference. sliding_window
    > 0: a query at position p sees keys p - sliding_window + 1 .. p."""
    num_heads, num_kv_heads = case.query.shape[1], case.keys[0].shape[1]
    outs = []
    starts = case.query_start_loc.tolist()
    for i, (k, v) in enumerate(zip(case.keys, case.values)):
        q = case.query[starts[i] : starts[i + 1]].double()  # [q_len, num_heads, head_dim]
        k = k.double().repeat_interleave(num_heads // num_kv_heads, dim=1)  # [seq_len, num_heads, head_dim]
        v = v.double().repeat_interleave(num_heads // num_kv_heads, dim=1)
        q_len, seq_len = q.shape[0], k.shape[0]
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        q_pos = torch.arange(seq_len - q_len, seq_len, device=q.device)[:, None]
        k_pos = torch.arange(seq_len, device=q.device)[None, :]
        hidden = (k_pos > q_pos) | ((q_pos - k_pos >= sliding_window) if sliding_window else False)
        scores = scores.masked_fill(hidden, float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", scores.softmax(dim=-1), v))
    return torch.cat(outs)
