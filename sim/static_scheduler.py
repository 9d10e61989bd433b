"""Request-level batching (HF generate), the baseline continuous batching is compared with."""

from __future__ import annotations

from sim.config import EngineConfig
from sim.kv_manager import KVCacheManager, cdiv
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler_base import Scheduler
from sim.scheduler_output import SchedulerOutput


class StaticScheduler(Scheduler):
    """Request-level batching (HF generate): a batch of up to max_num_seqs is prefilled together, padded
    to its longest prompt, and decoded until its longest reply is done. A member's reply is complete at
    its own last token (streamed), but its row and KV stay held, idle, until the batch ends; only then is
    the next batch formed. The token budget does not apply."""

    def __init__(self, engine: EngineConfig, kv: KVCacheManager, recorder: Recorder, replica: int = 0) -> None:
        super().__init__(engine, kv, recorder, replica)
        self.padded_len = 0  # the batch's longest prompt: every row is this long after the prefill
        self.steps_done = 0

    def schedule(self) -> SchedulerOutput:
        if not self.running:
            self._form_batch()
        out = SchedulerOutput()
        for request in self.running:
            if request.num_output_tokens < request.max_output_tokens:
                out.add(request, request.num_tokens - request.num_computed_tokens)
        rows = len(self.running)
        # Price the padded rectangle: prefill rows*L, then one token per row (idle ones too) each step.
        context = self.padded_len + self.steps_done
        num_new = self.padded_len if self.steps_done == 0 else 1
        out.num_tokens, out.num_seqs = rows * num_new, rows
        out.sum_context_tokens = rows * context
        out.attention_pairs = rows * (num_new * (context - num_new) + num_new * (num_new + 1) // 2)
        return out

    def _form_batch(self) -> None:
        """First come first served while the padded rectangle (rows x (longest prompt + longest reply))
        fits in the free blocks."""
        batch: list[Request] = []
        longest_prompt = longest_output = 0
        for request in self.waiting:
            prompt = max(longest_prompt, request.num_prompt_tokens)
            output = max(longest_output, request.max_output_tokens)
            blocks = (len(batch) + 1) * self._blocks_per_row(prompt + output)
            if len(batch) == self.config.max_num_seqs or blocks > self.kv.pool.num_free_blocks:
                break
            batch.append(request)
            longest_prompt, longest_output = prompt, output
        for request in batch:
            self.kv.allocate_slots(request, request.num_tokens, reserve_tokens=longest_prompt + longest_output)
            self._admit(request)
        self.padded_len, self.steps_done = longest_prompt, 0

    def _blocks_per_row(self, tokens: int) -> int:
        return cdiv(max(tokens, self.kv.contiguous_tokens or 0), self.kv.block_size)

    def update(self, output: SchedulerOutput, now_s: float, sampled: dict[int, int] | None = None) -> list[Request]:
        self.steps_done += 1
        for request, num_new in output.scheduled:  # blocks are allocated once per batch: register them as they fill
            self.kv.cache_full_blocks(request, request.num_computed_tokens + num_new)
        return super().update(output, now_s, sampled)

    def _retire(self, done: list[Request], now_s: float) -> list[Request]:
        for request in done:
            self._complete(request, now_s)
        if all(r.is_finished for r in self.running):  # the longest reply is done: the rows are released
            for request in self.running:
                self.kv.free(request)
            self.running = []
        return done
