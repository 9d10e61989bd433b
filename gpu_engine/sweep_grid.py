"""The step sweep's grid (gpu_engine.sweep): which step shapes to time, in what order, built as the scheduler
would have scheduled them.

Whole scenarios mix their steps in whatever proportions the load gives; a fit needs every term of the cost
model exercised on its own and together. So the sweep times single steps of chosen shapes:
    decode   B requests decoding one token each after C context tokens     (B x C)
    prefill  S prompt chunks of N tokens after K cached tokens             (N x K, a few S)
    mixed    B decodes plus one prompt chunk in the same step, as chunked prefill schedules them
up to the scenario's max_num_seqs, max_num_batched_tokens and max_model_len. Every shape is built with the
serving model's own Request, KVCacheManager and SchedulerOutput, so the runner gets the block tables and
positions a real step would, and the row carries exactly steps.csv's aggregates (STEP_COLUMNS).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.kv_manager import KVCacheManager, cdiv
from sim.request import Request
from sim.scheduler_output import SchedulerOutput


@dataclass(frozen=True)
class Shape:
    """One step: `num_decode` decodes after `decode_context` tokens each, plus `num_prefill` prompt chunks of
    `chunk` tokens after `cached` computed tokens; `sampled`: the chunks end their prompts (logits sampled)."""

    num_decode: int = 0
    decode_context: int = 0
    num_prefill: int = 0
    chunk: int = 0
    cached: int = 0
    sampled: bool = True

    @property
    def step_class(self) -> str:
        if not self.num_prefill:
            return "decode"
        return "prefill" if not self.num_decode else "mixed"

    @property
    def num_tokens(self) -> int:
        return self.num_decode + self.num_prefill * self.chunk

    @property
    def num_seqs(self) -> int:
        return self.num_decode + self.num_prefill

    def num_blocks(self, block_size: int) -> int:
        prefill_len = self.cached + self.chunk + (not self.sampled)
        return self.num_decode * cdiv(self.decode_context + 1, block_size) + self.num_prefill * cdiv(
            prefill_len, block_size
        )


def geometric(low: int, high: int, count: int) -> list[int]:
    """About `count` distinct integers from low to high, evenly spaced in log (both ends included)."""
    if high <= low:
        return [max(low, high)]
    return sorted({round(float(v)) for v in np.geomspace(low, high, count)})


def design_grid(
    max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int, block_size: int, max_blocks: int
) -> list[Shape]:
    """Every shape the limits allow (token budget, rows, model length, and `max_blocks` KV blocks)."""
    budget, max_len = max_num_batched_tokens, max_model_len
    max_batch = min(max_num_seqs, budget)
    contexts = geometric(block_size, max_len - 1, 6)
    shapes = [Shape(num_decode=b, decode_context=c) for b in geometric(1, max_batch, 7) for c in contexts]
    for chunk in geometric(min(block_size, budget), min(budget, max_len), 6):
        for i, cached in enumerate(sorted({0, *geometric(block_size, max_len - chunk - 1, 3)})):
            if cached + chunk < max_len:
                shapes.append(Shape(num_prefill=1, chunk=chunk, cached=cached, sampled=i % 2 == 0))
    for num_prompts in geometric(2, min(max_num_seqs, budget // block_size), 3):
        shapes.append(Shape(num_prefill=num_prompts, chunk=min(budget // num_prompts, max_len)))
    for b in geometric(1, min(max_num_seqs - 1, budget - block_size), 4):
        for c in geometric(block_size, max_len - 1, 3):
            for chunk in sorted({budget - b, max(block_size, (budget - b) // 4)}):
                chunk = min(chunk, max_len - 1)
                shapes.append(Shape(num_decode=b, decode_context=c, num_prefill=1, chunk=chunk, cached=0))
    return [s for s in dict.fromkeys(shapes) if s.num_seqs and s.num_blocks(block_size) <= max_blocks]


def sweep_order(shapes: Sequence[Shape], seed: int = 0) -> list[Shape]:
    """Classes interleaved, each in a seeded random order: any prefix of the list covers the grid evenly,
    so a budget that stops early still fits every term."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[Shape]] = {}
    for shape in shapes:
        by_class.setdefault(shape.step_class, []).append(shape)
    queues = [[group[i] for i in rng.permutation(len(group))] for group in by_class.values()]
    return [s for batch in itertools.zip_longest(*queues) for s in batch if s is not None]


def build_step(shape: Shape, kv: KVCacheManager, vocab_size: int, rng: np.random.Generator, ids) -> SchedulerOutput:
    """The shape as the scheduler would have scheduled it: requests with block tables from `kv`."""
    out = SchedulerOutput()
    parts = [(shape.decode_context, 1, 1)] * shape.num_decode
    parts += [(shape.cached, shape.chunk, 0)] * shape.num_prefill
    for computed, num_new, num_output in parts:
        prompt_len = computed + num_new - num_output + (num_new > 1 and not shape.sampled)
        tokens = rng.integers(0, vocab_size, prompt_len + num_output).tolist()
        request = Request(next(ids), 0.0, prompt_len, num_output + 1, prompt_token_ids=tokens[:prompt_len])
        request.output_token_ids = tokens[prompt_len:]
        request.num_output_tokens = num_output
        request.num_computed_tokens = computed
        if not kv.allocate_slots(request, num_new):
            raise ValueError(f"shape {shape} needs more than the {kv.pool.num_blocks} KV blocks allocated")
        out.add(request, num_new)
    return out


def blocks_for_grid(
    max_num_seqs: int, max_num_batched_tokens: int, max_model_len: int, block_size: int, limit: int
) -> int:
    """KV blocks the sweep needs: enough for its largest shape plus the null block (block 0, never handed
    out), at most `limit` (what the device holds)."""
    grid = design_grid(max_num_seqs, max_num_batched_tokens, max_model_len, block_size, limit - 1)
    return max(s.num_blocks(block_size) for s in grid) + 1
