"""Decode steps replayed from CUDA graphs, one per padded batch size (vLLM's cudagraph_capture_sizes).

A decode step (one new token per sequence) launches ~11 kernels per layer; in eager mode their Python
wrappers and Triton's dispatch cost more host time than a small batch's GPU time. So, as vLLM does, the
runner captures the model's forward once per batch size in `sizes` over fixed input buffers, and a decode
batch of n sequences replays the graph of the smallest size >= n, its rows past n padded:

- padding rows: token 0 at position 0, slot_mapping -1 (store_kv writes nothing), seq_len 1, so their
  attention reads one slot of a block id left in the table by an earlier step (always a valid id) and their
  logits are dropped;
- query_start_loc and logits_indices of a decode batch are always arange: fixed buffers, never copied;
- the block table is [max size, max_blocks_per_seq] wide, so the attention kernel's split count (chosen from
  shapes on the host at capture) is fixed per graph; only each row's first len(block_ids) entries are
  copied, the kernel never reads past a sequence's length;
- per step: the host writes input_ids, positions, slot_mapping and seq_lens (padding included) into one
  pinned [4, N] staging tensor, one async copy sends it, one more the block table rows; then the replay.
  The staging tensor is rewritten only after the previous step's sampled ids reached the host (the
  runner's `.tolist()`), so the async copy never reads a half-written buffer.

Prefill and mixed steps, and decode batches larger than the largest size, run eagerly.
With capture=False (CPU) the same padded buffers run the forward eagerly: the tests check the padding on
any machine.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np
import torch

from gpu_engine.attention import AttentionMetadata
from gpu_engine.model import KVCache, Transformer
from sim.memory import cudagraph_capture_sizes


def capture_sizes(largest: int) -> tuple[int, ...]:
    """vLLM's capture sizes (sim.memory.cudagraph_capture_sizes: 1, 2, 4, every 8 below 256, then every 16) up to
    `largest` sequences, ascending; () for none."""
    return tuple(sorted(cudagraph_capture_sizes(largest, largest)))


DEFAULT_CAPTURE_SIZES = capture_sizes(256)  # vLLM's default sizes for max_num_seqs 128 or more
ROW_ALIGN = 16  # int32s: each staged row starts 64-byte aligned, as build_batch aligns its arrays


class DecodeGraphs:
    """Fixed decode inputs for up to max(sizes) sequences and, on CUDA, one captured graph per size."""

    def __init__(
        self,
        model: Transformer,
        kv_caches: list[KVCache],
        sizes: Sequence[int],
        max_blocks_per_seq: int,
        capture: bool = True,
    ):
        if not sizes or min(sizes) < 1:
            raise ValueError(f"capture sizes must be positive, got {list(sizes)}")
        self.model, self.kv_caches = model, kv_caches
        self.sizes = sorted(set(sizes))
        self.max_blocks_per_seq = max_blocks_per_seq
        device = kv_caches[0][0].device
        width = -(-self.sizes[-1] // ROW_ALIGN) * ROW_ALIGN
        ints = {"dtype": torch.int32, "device": device}
        # rows: input_ids, positions, slot_mapping, seq_lens
        self.rows = torch.zeros(4, width, **ints)
        self.rows[2].fill_(-1)
        self.rows[3].fill_(1)
        self.staging = torch.zeros(4, width, dtype=torch.int32, pin_memory=device.type == "cuda")
        self.block_tables = torch.zeros(self.sizes[-1], max_blocks_per_seq, **ints)
        self.arange = torch.arange(width + 1, **ints)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.num_replays = 0
        if capture:
            self._capture()

    @property
    def max_size(self) -> int:
        return self.sizes[-1]

    def fits(self, num_seqs: int, max_query_len: int, max_blocks: int) -> bool:
        """Whether a step of num_seqs sequences can replay a graph."""
        return max_query_len == 1 and num_seqs <= self.max_size and max_blocks <= self.max_blocks_per_seq

    def _inputs(self, size: int) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
        attn = AttentionMetadata(
            slot_mapping=self.rows[2, :size],
            block_tables=self.block_tables[:size],
            seq_lens=self.rows[3, :size],
            query_start_loc=self.arange[: size + 1],
            max_query_len=1,
            logits_indices=self.arange[:size],
        )
        return self.rows[0, :size], self.rows[1, :size], attn

    def _forward(self, size: int) -> torch.Tensor:
        input_ids, positions, attn = self._inputs(size)
        return self.model(input_ids, positions, attn, self.kv_caches)

    @torch.inference_mode()
    def _capture(self) -> None:
        """Largest size first, all graphs in one memory pool (smaller ones reuse the largest's blocks), each
        after one eager warm-up run on a side stream (Triton compiles there, cuBLAS picks its kernels); the
        padding rows write nothing to the cache."""
        pool = None
        for size in reversed(self.sizes):
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                self._forward(size)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                logits = self._forward(size)
            pool = graph.pool()
            self.graphs[size] = (graph, logits)
        torch.cuda.synchronize()

    def run(
        self,
        input_ids: np.ndarray,
        positions: np.ndarray,
        slot_mapping: np.ndarray,
        seq_lens: np.ndarray,
        block_tables: torch.Tensor,  # [num_seqs, width] int32, on the host
    ) -> torch.Tensor:  # [num_seqs, vocab]: the logits of every row
        n = len(seq_lens)
        size = self.sizes[bisect.bisect_left(self.sizes, n)]
        staged = self.staging.numpy()
        staged[0, :n], staged[1, :n], staged[2, :n], staged[3, :n] = input_ids, positions, slot_mapping, seq_lens
        staged[:2, n:size], staged[2, n:size], staged[3, n:size] = 0, -1, 1
        # all of it (a few KiB, contiguous, so truly async): rows past `size` are not read by this graph, and a
        # step that replays a larger graph writes its own padding there first
        self.rows.copy_(self.staging, non_blocking=True)
        self.block_tables[:n, : block_tables.shape[1]].copy_(block_tables, non_blocking=True)
        self.num_replays += 1
        if size in self.graphs:
            graph, logits = self.graphs[size]
            graph.replay()
        else:  # capture=False: the same padded inputs, eagerly
            logits = self._forward(size)
        return logits[:n]
