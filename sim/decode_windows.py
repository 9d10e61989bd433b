"""Decode windows: the next pure-decode steps of the running requests planned and applied at once.

The continuous scheduler's fast path for the simulator (the live engine steps one by one): how many next
steps are certain to be pure decode, their rows and contexts, the blocks they take and the requests' state
after them, as stepping them one by one would leave it. `sim/replica.py` prices a window and advances the
clock; these methods keep the serving model's state. Mixed into `ContinuousScheduler`, whose state they
read and change.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from sim.request import Request

if TYPE_CHECKING:
    from sim.config import EngineConfig
    from sim.kv_manager import KVCacheManager
    from sim.metrics import Recorder


class WindowStart(NamedTuple):
    """The running requests' counts when a decode window starts, in running order: read once, by
    decode_window_bound, for every later method of the window (nothing changes them until it is applied)."""

    computed: list[int]  # tokens computed
    left: list[int]  # tokens left to sample
    held: list[int]  # blocks held


class DecodeWindows:
    """The decode-window methods of `ContinuousScheduler` (its state, declared here for them)."""

    config: EngineConfig
    kv: KVCacheManager
    recorder: Recorder
    running: list[Request]
    waiting: deque[Request]
    fast_decode_rows: bool
    finished_holding: list[Request]  # Scheduler's: finished requests whose slots and blocks are still held
    num_slots_taken: int
    _finish: Callable[[Request, float], None]  # Scheduler's: the reply is complete, its blocks freed (or held)
    release_finished: Callable[[int | None], None]

    def decode_window_bound(self, through_finishes: bool = False) -> tuple[int, WindowStart | None]:
        """How many next steps are certain to be pure-decode steps of the running requests: none mid-prompt,
        every block they need free, and no request waiting that could be admitted. Without through_finishes,
        none finishing either (the same batch every step); with it, the batch shrinks as requests sample their
        last tokens, up to the last one's (for an open loop with nobody waiting, where a finish changes nothing
        but the batch: the driver's choice). 0 or 1: step. Off with the fast paths (sliding windows:
        sim/kv_groups.py). With a bound of 2 or more, the running requests' counts for the window's methods."""
        if not self.fast_decode_rows or not self.running or len(self.running) > self.config.max_num_batched_tokens:
            return 0, None
        if self.finished_holding:
            # The next step's plan frees them (hold_finished), after its allocations: that step is stepped, so
            # that the queue's head sees their slots and blocks free only from the step after it.
            return 0, None
        # The cheap tests first (each rules a window out; none changes anything): the latest admitted request
        # is mid-prompt (a chunked prefill), someone finishes within two steps (a busy engine has one most
        # steps), the queue's head can be admitted.
        last = self.running[-1]
        if last.num_prompt_tokens + last.num_output_tokens - last.num_computed_tokens != 1:
            return 0, None
        left = [r.max_output_tokens - r.num_output_tokens for r in self.running]
        steps = max(left) if through_finishes else min(left) - 1
        if steps < 2:
            return 0, None
        if self.waiting and not self._waiting_head_blocked():
            return 0, None
        computed, held = [], []
        for r in self.running:
            c = r.num_computed_tokens
            if r.num_prompt_tokens + r.num_output_tokens - c != 1 or c < r.num_prompt_tokens:
                return 0, None  # someone is mid-prompt (a chunk may stop one token short of a prompt's end)
            computed.append(c)
            held.append(len(r.block_ids))
        start = WindowStart(computed, left, held)
        # Blocks the window needs: what blocks_needed(r, its steps) sums to over the running requests, a request
        # decoding until its last token at most. Short of them, the window halves until they fit: the halvings
        # are counted at once (a nearly full pool). Blocks that requests finishing in the window free are not
        # counted on: the window's blocks all come from those free before it (which keeps the free queue's
        # order that of stepping one by one: allocations take from its front, frees join its back).
        block_size, floor_tokens = self.kv.block_size, self.kv.contiguous_tokens or 0
        num_free, num_held = self.kv.pool.num_free_blocks, sum(held)
        if through_finishes:  # steps is the most any request has left: each decodes to its last token
            needed = sum(-(-max(c + n, floor_tokens) // block_size) for c, n in zip(computed, left))
        else:
            needed = sum(-(-max(c + steps, floor_tokens) // block_size) for c in computed)
        if needed - num_held <= num_free:
            return steps, start
        halvings = []
        while (steps := steps // 2) >= 2:
            halvings.append(steps)
        if not halvings:
            return 0, None
        steps_each = np.minimum(np.array(halvings), np.array(left)[:, None])
        tokens = np.maximum(np.array(computed)[:, None] + steps_each, floor_tokens)
        fits = np.flatnonzero((-(-tokens // block_size)).sum(axis=0) - num_held <= num_free)
        return (halvings[fits[0]], start) if len(fits) else (0, None)

    def decode_window_steps(self, start: WindowStart, num_steps: int) -> tuple[int | np.ndarray, np.ndarray]:
        """(rows, context tokens after the step summed over them) of each of the next num_steps pure-decode
        steps: step k's rows are the running requests with at least k tokens left to sample, each at its
        computed tokens + k (a decode token attends over its whole context). Rows are one int when nobody
        finishes in those steps (the same rows every step)."""
        computed, left = start.computed, start.left
        if min(left) > num_steps:  # nobody finishes: the contexts grow by the rows each step
            num_rows, first = len(computed), sum(computed) + len(computed)
            return num_rows, np.arange(first, first + num_rows * num_steps, num_rows)
        # Runs of steps with the same rows, cut where requests sample their last tokens (fewest left first).
        rows_of_run, computed_of_run, run_ends = [], [], []
        num_rows, sum_computed, done = len(computed), sum(computed), 0
        for n, c in sorted(zip(left, computed)):
            if n >= num_steps:
                break
            if n > done:  # steps done + 1 .. n have num_rows rows
                rows_of_run.append(num_rows)
                computed_of_run.append(sum_computed)
                run_ends.append(n)
                done = n
            num_rows -= 1
            sum_computed -= c
        rows_of_run.append(num_rows)
        computed_of_run.append(sum_computed)
        run_ends.append(num_steps)
        lengths = [end - begin for begin, end in zip([0, *run_ends], run_ends)]
        rows = np.array(rows_of_run).repeat(lengths)  # the method: np.repeat of a list takes a slow path
        return rows, np.array(computed_of_run).repeat(lengths) + rows * np.arange(1, num_steps + 1)

    def _waiting_head_blocked(self) -> bool:
        """The queue's head cannot be admitted after the running requests' decode tokens: what
        _schedule_waiting would find, without its side effects. It stays blocked through a decode window
        (so do those behind it: first come, first served): the rows and so the budget are the same each
        step, free blocks only get fewer, and its prefix hits only fewer, which needs more blocks."""
        if self.num_slots_taken >= self.config.max_num_seqs:
            return True
        budget = self.config.max_num_batched_tokens - len(self.running)
        if budget <= 0:
            return True
        kv, request = self.kv, self.waiting[0]
        hits = kv.get_computed_blocks(request) if request.num_computed_tokens == 0 else []
        num_new = request.num_tokens - request.num_computed_tokens - len(hits) * kv.block_size
        if not self.config.enable_chunked_prefill and num_new > budget:
            return True
        needed = kv.blocks_needed(request, min(num_new, budget), len(hits))
        free = kv.pool.num_free_blocks - kv.pool.num_free_of(hits)
        if needed > free:
            return True  # allocate_slots would fail
        return self.config.scheduler_reserve_full_isl and not kv.full_sequence_fits(request, hits)

    def advance_decode_window(
        self, start: WindowStart, step_end_s: np.ndarray, rows: int | np.ndarray
    ) -> tuple[list[Request], np.ndarray]:
        """Advance every running request by len(step_end_s) decode steps ending at those times, or until its last
        token, taking the blocks they need (room checked by decode_window_bound); `rows`: each step's, as
        decode_window_steps gave them. Returns those that finished, retired in the order stepping one by one
        retires them (by step, then running order), and the blocks in use during each step, as stepping one by
        one would have them: a finished request's blocks are free from the step after its last.

        Windows run with the fast paths only, whose KV manager defers registering a simulated request's private
        blocks (its decode blocks) to its preemption, and its shared-prefix blocks were registered at its
        prefill: a window registers nothing, and its blocks come in one draw from the free queue, taken request
        after request as allocate_slots would. Nothing else takes from this pool while the window is in flight
        (arrivals only queue), so its blocks are drawn when it is applied, with the requests' counts (at its end,
        or at its start when the step after it follows at once: sim/replica.py)."""
        num_steps = len(step_end_s)
        first_end, last_end = float(step_end_s[0]), float(step_end_s[-1])
        kv, running = self.kv, self.running
        block_size = kv.block_size
        used = kv.pool.num_used_blocks
        first_gaps, finishing = [], []  # finishing: (steps to its last token, running order, request)
        # The step k (1-based) at which each new block is first needed: block b (tokens [b*bs, (b+1)*bs)) once
        # computed + k passes b*bs. A running request holds the blocks of its computed tokens and of its floor
        # (a contiguous reservation), so its new blocks b >= held are needed at steps b*bs + 1 - computed >= 1,
        # one every block_size steps. A window adds a block per request every block_size steps at most, so this
        # list is short where a (requests x steps) table would not be.
        first_needed, growing = [], []  # growing: (request, blocks it takes)
        freed_after, freed = [], []  # a request finishing before the last step: its last step, the blocks it frees
        for i, (request, c, left, held) in enumerate(zip(running, start.computed, start.left, start.held)):
            first_gaps.append(first_end - request.last_token_s)
            if left > num_steps:
                steps = num_steps
                request.last_token_s = last_end
            else:
                steps = left
                request.last_token_s = float(step_end_s[left - 1])
                finishing.append((left, i, request))
            request.num_computed_tokens = c + steps
            request.num_output_tokens += steps
            if c + steps > held * block_size:  # else its blocks hold the window's tokens
                num_blocks = -(-(c + steps) // block_size)
                growing.append((request, num_blocks - held))
                first_needed += range(held * block_size + 1 - c, num_blocks * block_size + 1 - c, block_size)
            else:
                num_blocks = held
            if steps < num_steps:
                freed_after.append(steps)
                freed.append(num_blocks)
        if growing:
            new_ids = kv.pool.get_new_blocks(len(first_needed))
            taken = 0
            for request, n in growing:
                request.block_ids += new_ids[taken : taken + n]
                taken += n
        blocks = self._blocks_in_use(num_steps, used, first_needed, freed_after, freed)
        self.recorder.token_gaps(first_gaps)
        # Each step's gap, once per request in it (what np.diff computes, without its overhead).
        step_gaps = step_end_s[1:] - step_end_s[:-1]
        if not finishing:
            self.recorder.token_gaps(step_gaps, times=len(running))
            return [], blocks
        self.recorder.token_gaps(step_gaps, times=rows[1:])
        finishing.sort()
        done = [request for _, _, request in finishing]
        for request in done:
            self._finish(request, request.last_token_s)
        if self.finished_holding:  # hold_finished: a request is freed by the plan of the step after its last one,
            # inside the window for all but those finishing in its last step, which the next plan frees
            self.release_finished(sum(left < num_steps for left, _, _ in finishing))
        for request in done:  # a few of the running: list.remove beats rebuilding the list
            running.remove(request)
        return done, blocks

    @staticmethod
    def _blocks_in_use(
        num_steps: int, used: int, first_needed: list[int], freed_after: list[int], freed: list[int]
    ) -> np.ndarray:
        """Blocks in use during each of a window's steps: `used` before it, plus those first needed at each step
        (1-based), less those freed after each step (a request finishing in the window's last step frees none in
        it). Summed from per-step changes: the steps where blocks are first needed counted by np.bincount (one
        call, where a Python loop over a window's dozens cost more), the one or two frees set in Python."""
        change = np.bincount(first_needed, minlength=num_steps + 1)  # first_needed holds steps 1..num_steps
        change[0] = used
        for last_step, num_blocks in zip(freed_after, freed):
            change[last_step + 1] -= num_blocks
        return change.cumsum()[1:]
