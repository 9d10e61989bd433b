"""The model runner: owns the model and the paged KV cache, turns one scheduled step into one forward.

The scheduler decides; the runner only reads. For every (request, num_new_tokens) of a step it takes the
request's pre-step `num_computed_tokens`, `block_ids` (already covering the new tokens) and token ids,
packs all requests' new tokens into one flat batch (prefill chunks and decode tokens mixed), runs the
forward and samples one token for each request that reached the end of its known tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gpu_engine.attention import AttentionMetadata
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

    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    attn: AttentionMetadata
    sampled_request_ids: list[int]


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


def build_batch(scheduled: Scheduled, block_size: int, device: torch.device | str) -> Batch:
    """Pack the new tokens of every scheduled request back to back; read-only on the requests."""
    token_ids: list[int] = []
    positions, slots, seq_lens, sampled_rows, sampled_ids = [], [], [], [], []
    block_tables = np.zeros((len(scheduled), max(len(r.block_ids) for r, _ in scheduled)), dtype=np.int32)
    query_start_loc = np.zeros(len(scheduled) + 1, dtype=np.int32)
    for i, (request, num_new) in enumerate(scheduled):
        start, stop = request.num_computed_tokens, request.num_computed_tokens + num_new
        _check_scheduled(request, num_new, block_size)
        table = np.asarray(request.block_ids, dtype=np.int64)
        pos = np.arange(start, stop)
        token_ids += request.token_ids(start, stop)
        positions.append(pos)
        slots.append(table[pos // block_size] * block_size + pos % block_size)
        block_tables[i, : len(table)] = table
        seq_lens.append(stop)
        query_start_loc[i + 1] = query_start_loc[i] + num_new
        if stop >= request.num_tokens:  # caught up with its known tokens: the next one is sampled now
            sampled_rows.append(query_start_loc[i + 1] - 1)
            sampled_ids.append(request.request_id)
    attn = AttentionMetadata(
        slot_mapping=torch.from_numpy(np.concatenate(slots)).to(device),
        block_tables=torch.from_numpy(block_tables).to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32, device=device),
        query_start_loc=torch.from_numpy(query_start_loc).to(device),
        max_query_len=max(n for _, n in scheduled),
        logits_indices=torch.tensor(sampled_rows, dtype=torch.int64, device=device),
    )
    input_ids = torch.tensor(token_ids, dtype=torch.int64, device=device)
    return Batch(input_ids, torch.from_numpy(np.concatenate(positions)).to(device), attn, sampled_ids)


def _check_scheduled(request: Request, num_new: int, block_size: int) -> None:
    stop = request.num_computed_tokens + num_new
    if num_new < 1 or stop > request.num_tokens:
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
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p  # the tokens before it already reach top_p
    sorted_probs[outside] = 0.0  # the most likely token is never outside
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)


class ModelRunner:
    """Model + KV cache on one device. `execute(scheduled)` runs one step and returns {request_id: token_id}.

    num_blocks=None leaves the cache unallocated: profile first (profiling.profile_num_blocks), then call
    allocate(num_blocks), as vLLM does at start-up.
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
    ):
        self.spec, self.dtype, self.device = spec, torch_dtype(dtype), torch.device(device)
        self.block_size, self.sampling = block_size, sampling
        init_seed, sample_seed = (int(s.generate_state(1)[0]) for s in np.random.SeedSequence(seed).spawn(2))
        self.memory_at_start = non_torch_device_bytes(self.device)  # before our first allocation
        self.model: Transformer = build_model(spec, self.dtype, self.device)
        if weights_path is None:
            init_random_weights(self.model, init_seed)
        else:
            load_weights(self.model, weights_path)
        self.generator = torch.Generator(self.device).manual_seed(sample_seed)
        self.kv_caches: list[KVCache] = []
        if num_blocks is not None:
            self.allocate(num_blocks)

    def allocate(self, num_blocks: int) -> None:
        self.kv_caches = []  # free the old cache before the new one is allocated
        self.kv_caches = allocate_kv_caches(self.spec, num_blocks, self.block_size, self.dtype, self.device)

    @property
    def num_blocks(self) -> int:
        return self.kv_caches[0][0].shape[0] if self.kv_caches else 0

    @torch.inference_mode()
    def execute(self, scheduled: Scheduled) -> dict[int, int]:
        if not scheduled:
            return {}
        batch = build_batch(scheduled, self.block_size, self.device)
        token_ids = self.run(batch, self.kv_caches)
        return dict(zip(batch.sampled_request_ids, token_ids.tolist(), strict=True))

    def run(self, batch: Batch, kv_caches: list[KVCache]) -> torch.Tensor:  # [R] int64 sampled ids
        logits = self.model(batch.input_ids, batch.positions, batch.attn, kv_caches)  # [R, vocab]
        return sample(logits, self.sampling, self.generator)


def non_torch_device_bytes(device: torch.device) -> int:
    """Device memory in use that torch's allocator did not reserve (CUDA context, cuBLAS, NCCL); 0 on CPU."""
    if device.type != "cuda":
        return 0
    free, total = torch.cuda.mem_get_info(device)
    return total - free - torch.cuda.memory_reserved(device)
