"""The model runner: owns the model and the paged KV cache, turns one scheduled step into one forward.

The scheduler decides; the runner only reads. For every (request, num_new_tokens) of a step it takes the
request's pre-step `num_computed_tokens`, `block_ids` (already covering the new tokens) and token ids,
packs all requests' new tokens into one flat batch (prefill chunks and decode tokens mixed), runs the
forward and samples one token for each request that reached the end of its known tokens.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from gpu_engine.attention import TORCH_OPS, AttentionMetadata, kernel_ops
from gpu_engine.cuda_graphs import DEFAULT_CAPTURE_SIZES, DecodeGraphs
from gpu_engine.model import KVCache, Transformer, build_model
from gpu_engine.weights import init_random_weights, load_weights
from sim.config import ModelSpec
from sim.request import Request

Scheduled = list[tuple[Request, int]]  # (request, num_new_tokens) in batch order


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0  # keep the smallest set of tokens whose probability reaches top_p


@dataclass(frozen=True)
class Batch:
    """One step's model inputs; `sampled_request_ids[i]` owns logits row i."""

    input_ids: torch.Tensor  # [T] int32
    positions: torch.Tensor  # [T] int32
    attn: AttentionMetadata
    sampled_request_ids: list[int]
    # Speculative decoding: logits rows per sampled request (1, or 1 + its drafts: every verified position); empty:
    # one each
    logits_per_request: tuple[int, ...] = ()


def torch_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A scenario's dtype name ("bfloat16") as a torch.dtype."""
    return dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype)


def kv_block_bytes(spec: ModelSpec, block_size: int, dtype: torch.dtype) -> int:
    """K and V of every layer for one block: the unit the KV memory is divided into."""
    return 2 * spec.num_hidden_layers * block_size * spec.kv_size * dtype.itemsize


def allocate_kv_caches(
    spec: ModelSpec, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device | str
) -> list[KVCache]:
    """One allocation, viewed as (k_cache, v_cache) per layer, each [num_blocks, block_size, kv_heads, head_dim].

    Zeroed, so a kernel that reads a never-written slot under a mask multiplies zeros, not NaN garbage.
    """
    shape = (spec.num_hidden_layers, 2, num_blocks, block_size, spec.num_key_value_heads, spec.head_dim)
    kv = torch.zeros(shape, dtype=dtype, device=device)
    return [(layer[0], layer[1]) for layer in kv]


class BlockTableRows:
    """Each scheduled request's block ids as an int32 numpy row, converting only the ids appended since the
    last step (converting whole tables every step costs ~0.3 ms at 64 requests x 4k tokens).

    Relies on how the scheduler edits block_ids: it only appends to the list, or replaces the list (a
    preemption frees the blocks and starts a new one); a replaced or shortened list is converted afresh.
    The one in-place edit, a sliding window's blocks turned into the null block once freed (sim/kv_groups.py),
    is not picked up: those entries lie wholly before the window, which attention never reads.
    """

    def __init__(self):
        self._rows: dict[int, tuple[list[int], np.ndarray, int]] = {}  # request_id -> (list, row, converted)

    def update(self, requests: list[Request]) -> list[np.ndarray]:
        """The rows of these requests, in order; forgets every other request."""
        rows, out = {}, []
        for request in requests:
            ids = request.block_ids
            cached = self._rows.get(request.request_id)
            if cached is None or cached[0] is not ids or cached[2] > len(ids):
                cached = (ids, np.empty(max(16, 2 * len(ids)), dtype=np.int32), 0)
            _, row, done = cached
            if len(ids) > row.shape[0]:
                row = np.concatenate((row[:done], np.empty(2 * len(ids) - done, dtype=np.int32)))
            row[done : len(ids)] = ids[done:]
            rows[request.request_id] = (ids, row, len(ids))
            out.append(row[: len(ids)])
        self._rows = rows
        return out


ALIGN = 16  # int32s: every metadata array starts on a 64-byte boundary, so Triton's specialisation on
# pointer alignment sees the same alignment every step (no recompilation)


def build_batch(
    scheduled: Scheduled,
    block_size: int,
    device: torch.device | str,
    block_rows: BlockTableRows | None = None,
    drafts: dict[int, list[int]] | None = None,
) -> Batch:
    """Pack the new tokens of every scheduled request back to back; read-only on the requests.

    All the step's integer inputs are written into one int32 host buffer (pinned on CUDA) and copied to
    the device at once, without waiting; on CPU the tensors are views of that buffer. `drafts`: speculative
    decoding's drafted tokens per request; a row scheduled beyond its known tokens verifies them (its tokens
    are its last one and its drafts, and every one of them gets a logits row).
    """
    device = torch.device(device)
    num_seqs = len(scheduled)
    token_ids: list[int] = []
    sampled_ids = []
    starts, num_new = np.empty(num_seqs, dtype=np.int64), np.empty(num_seqs, dtype=np.int64)
    sampled = np.zeros(num_seqs, dtype=bool)
    logits_rows = np.ones(num_seqs, dtype=np.int64)  # per row: 1, or 1 + the drafts it verifies
    for i, (request, n) in enumerate(scheduled):
        start = request.num_computed_tokens
        # drafts verified beyond the known tokens (only those proposed: a row beyond them is refused below)
        extra = min(max(0, start + n - request.num_tokens), len(drafts.get(request.request_id, ()))) if drafts else 0
        _check_scheduled(request, n, block_size, extra)
        token_ids += request.token_ids(start, start + n - extra)
        if extra:
            token_ids += drafts[request.request_id][:extra]
            logits_rows[i] += extra
        starts[i], num_new[i] = start, n
        if start + n >= request.num_tokens:  # caught up with its known tokens: the next one is sampled now
            sampled[i] = True
            sampled_ids.append(request.request_id)
    rows = (block_rows or BlockTableRows()).update([request for request, _ in scheduled])
    num_tokens, width = len(token_ids), max(len(row) for row in rows)
    sizes = {
        "input_ids": num_tokens,
        "positions": num_tokens,
        "slot_mapping": num_tokens,
        "logits_indices": int(logits_rows[sampled].sum()),
        "seq_lens": num_seqs,
        "query_start_loc": num_seqs + 1,
        "block_tables": num_seqs * width,
    }
    offsets = np.cumsum([0] + [-(-size // ALIGN) * ALIGN for size in sizes.values()])
    host = torch.zeros(int(offsets[-1]), dtype=torch.int32, pin_memory=device.type == "cuda")
    buf = {name: host.numpy()[o : o + size] for (name, size), o in zip(sizes.items(), offsets)}

    buf["input_ids"][:] = token_ids
    query_start_loc = buf["query_start_loc"]
    np.cumsum(num_new, out=query_start_loc[1:])
    seq_of_token = np.repeat(np.arange(num_seqs), num_new)
    positions = np.arange(num_tokens) - query_start_loc[seq_of_token] + starts[seq_of_token]  # int64
    buf["positions"][:] = positions
    block_tables = buf["block_tables"].reshape(num_seqs, width)  # zeros past each sequence's blocks
    for i, row in enumerate(rows):
        block_tables[i, : len(row)] = row
    block_ids = block_tables[seq_of_token, positions // block_size].astype(np.int64)
    buf["slot_mapping"][:] = block_ids * block_size + positions % block_size
    buf["seq_lens"][:] = starts + num_new
    if drafts:  # every verified position's logits, in order: the row's last 1 + drafts tokens
        ends, counts = query_start_loc[1:][sampled], logits_rows[sampled]
        buf["logits_indices"][:] = (
            np.repeat(ends - counts, counts) + np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        )
    else:
        buf["logits_indices"][:] = query_start_loc[1:][sampled] - 1

    on_device = host if device.type == "cpu" else host.to(device, non_blocking=True)
    t = {name: on_device[o : o + size] for (name, size), o in zip(sizes.items(), offsets)}
    attn = AttentionMetadata(
        slot_mapping=t["slot_mapping"],
        block_tables=t["block_tables"].view(num_seqs, width),
        seq_lens=t["seq_lens"],
        query_start_loc=t["query_start_loc"],
        max_query_len=int(num_new.max()),
        logits_indices=t["logits_indices"],
    )
    per_request = tuple(logits_rows[sampled].tolist()) if drafts else ()
    return Batch(t["input_ids"], t["positions"], attn, sampled_ids, per_request)


def _check_scheduled(request: Request, num_new: int, block_size: int, num_drafts: int = 0) -> None:
    stop = request.num_computed_tokens + num_new
    if num_new < 1 or stop > request.num_tokens + num_drafts:
        raise ValueError(
            f"request {request.request_id}: {num_new} new tokens after {request.num_computed_tokens} computed,"
            f" but it has {request.num_tokens} tokens"
        )
    if len(request.block_ids) * block_size < stop:
        raise ValueError(
            f"request {request.request_id}: {len(request.block_ids)} blocks of {block_size} cannot hold"
            f" {stop} tokens; the scheduler allocates blocks before execute()"
        )


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> torch.Tensor:
    """logits: [R, vocab] -> [R] int64 token ids. In float32."""
    logits = logits.float()
    if params.temperature == 0.0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        probs = _top_p(probs, params.top_p)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def _top_p(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    # A top_p below the dtype's smallest normal number would compare as 0 and mask every token: the most likely
    # one (0 before it) must stay in, whatever top_p > 0 is given.
    top_p = max(top_p, torch.finfo(probs.dtype).tiny)
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p  # the tokens before it already reach top_p
    sorted_probs.masked_fill_(outside, 0.0)  # the most likely token is never outside; no host sync
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


class ModelRunner:
    """Model + KV cache on one device. `execute(scheduled)` runs one step and returns {request_id: token_id}.

    num_blocks=None leaves the cache unallocated: profile first (profiling.profile_num_blocks), then call
    allocate(num_blocks), as vLLM does at start-up.

    On CUDA with the Triton kernels, allocate() also captures decode steps of up to max(cuda_graph_sizes)
    sequences in CUDA graphs (cuda_graphs.DecodeGraphs; None: vLLM's default sizes up to 256, (): none, every
    step eager). Prefill and mixed steps, and larger decode batches, run eagerly.
    """

    def __init__(
        self,
        spec: ModelSpec,
        dtype: str | torch.dtype,
        device: torch.device | str,
        num_blocks: int | None,
        block_size: int,
        seed: int = 0,
        sampling: SamplingParams = SamplingParams(),
        weights_path: str | None = None,  # a local HF safetensors directory; None: seeded random weights
        cuda_graph_sizes: Sequence[int] | None = None,
    ):
        self.spec, self.dtype, self.device = spec, torch_dtype(dtype), torch.device(device)
        self.block_size, self.sampling = block_size, sampling
        self.block_rows = BlockTableRows()  # block tables converted incrementally, step to step
        init_seed, sample_seed = (int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(2))
        self.memory_at_start = non_torch_device_bytes(self.device)  # before our first allocation
        self.model: Transformer = build_model(spec, self.dtype, self.device)
        if weights_path is None:
            init_random_weights(self.model, init_seed)
        else:
            load_weights(self.model, weights_path)
        self.generator = torch.Generator(self.device).manual_seed(sample_seed)
        self.cuda_graph_sizes = DEFAULT_CAPTURE_SIZES if cuda_graph_sizes is None else tuple(cuda_graph_sizes)
        self.decode_graphs: DecodeGraphs | None = None
        # host seconds of the last execute() before it waited for the sampled ids: the CPU's share of a step
        # (on CUDA the GPU runs behind it; when this exceeds the GPU's time, the GPU idles)
        self.last_host_s = 0.0
        self.kv_caches: list[KVCache] = []
        if num_blocks is not None:
            self.allocate(num_blocks)

    def allocate(self, num_blocks: int) -> None:
        """Allocate the KV cache; with the Triton kernels, also compile the split-context decode variant and,
        on CUDA, capture the decode graphs."""
        self.kv_caches, self.decode_graphs = [], None  # free the old cache before the new one is allocated
        self.kv_caches = allocate_kv_caches(self.spec, num_blocks, self.block_size, self.dtype, self.device)
        if kernel_ops(self.device.type) is not TORCH_OPS:
            from planner_kernels.paged_attention import compile_split_path

            compile_split_path(self.spec.num_attention_heads, *self.kv_caches[0])
            if self.spec.num_sliding_layers:  # the window is a constexpr of the kernel: its own variant
                compile_split_path(self.spec.num_attention_heads, *self.kv_caches[0], self.spec.sliding_window)
            if self.device.type == "cuda" and self.cuda_graph_sizes:
                self.use_decode_graphs(capture=True)

    def use_decode_graphs(self, capture: bool) -> None:
        """Route decode steps through DecodeGraphs (capture=False: its padded buffers, run eagerly: for tests)."""
        max_blocks = min(self.num_blocks, -(-self.spec.max_position_embeddings // self.block_size))
        sizes = self.cuda_graph_sizes or DEFAULT_CAPTURE_SIZES
        self.decode_graphs = DecodeGraphs(self.model, self.kv_caches, sizes, max_blocks, capture)

    @property
    def num_blocks(self) -> int:
        return self.kv_caches[0][0].shape[0] if self.kv_caches else 0

    @torch.inference_mode()
    def execute(self, scheduled: Scheduled) -> dict[int, int]:
        if not scheduled:
            return {}
        start = time.perf_counter()
        graphs = self.decode_graphs
        if graphs is not None and graphs.fits(
            len(scheduled), max(n for _, n in scheduled), max(len(r.block_ids) for r, _ in scheduled)
        ):
            request_ids, token_ids = self._execute_graph(scheduled, graphs)
        else:
            batch = build_batch(scheduled, self.block_size, self.device, self.block_rows)
            request_ids, token_ids = batch.sampled_request_ids, self.run(batch, self.kv_caches)
        self.last_host_s = time.perf_counter() - start
        return dict(zip(request_ids, token_ids.tolist(), strict=True))

    def _execute_graph(self, scheduled: Scheduled, graphs: DecodeGraphs) -> tuple[list[int], torch.Tensor]:
        """A decode step through the graph of its padded size: the batch is packed on the host only."""
        host = build_batch(scheduled, self.block_size, "cpu", self.block_rows)
        attn = host.attn
        logits = graphs.run(host.input_ids.numpy(), host.positions.numpy(), attn.slot_mapping.numpy(),
                            attn.seq_lens.numpy(), attn.block_tables)  # fmt: skip
        num_sampled = len(host.sampled_request_ids)
        if num_sampled < len(scheduled):  # a one-token prefill chunk short of its prompt's end samples nothing
            logits = logits[attn.logits_indices.to(self.device, torch.long)]
        return host.sampled_request_ids, sample(logits, self.sampling, self.generator)

    def run(self, batch: Batch, kv_caches: list[KVCache]) -> torch.Tensor:  # [R] int64 sampled ids
        logits = self.model(batch.input_ids, batch.positions, batch.attn, kv_caches)  # [R, vocab]
        return sample(logits, self.sampling, self.generator)


def non_torch_device_bytes(device: torch.device) -> int:
    """Device memory in use that torch's allocator did not reserve (CUDA context, cuBLAS, NCCL); 0 on CPU."""
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free - torch.cuda.memory_reserved(device)
