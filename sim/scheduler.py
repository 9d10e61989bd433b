"""Which requests run in the next step, and with how many tokens (vLLM v1 semantics; static as a baseline).

There is no prefill or decode phase: each running request has `num_computed_tokens`, which catches up
with `num_tokens` (prompt + outputs so far) a chunk at a time within the token budget. The scheduler
changes request state only in schedule() (admission, blocks, preemption) and update() (after the step),
or, in the simulator, in a decode window that does what a run of them would (sim/decode_windows.py). Both
the simulator and the live engine call exactly this code. What both policies share is `sim/scheduler_base.py`;
static batches are `sim/static_scheduler.py`; build_scheduler picks one.

The decode rows of schedule() are inlined for speed (`fast_decode_rows`, the simulator's; a live request keeps
the plain path). What they equal is the plain path every other row takes:

    num_new = min(request.num_tokens - request.num_computed_tokens, budget)
    if not self._allocate_or_preempt(request, num_new, out):   # allocate_slots, preempting while short
        break
    out.add(request, num_new)

A running request that decodes one token, whose token starts at most one new block, and that registers no full
block in the prefix cache, needs nothing of allocate_slots but that block: the fast row appends it to
`out.scheduled`, draws the blocks of all such rows together in row order (the same ids one draw each would give),
and adds their contexts to `out`'s aggregates in one go. Anything else (no free block, a block to register, a
prompt chunk) takes the plain path. `build_scheduler(fast_paths=False)` runs the plain path for every row (and
registers every block at allocation), and the property test
`tests/test_simulator.py::test_fast_forward_matches_stepping_over_random_scenarios` holds every step row and metric
of a run to it over random scenarios (open and closed loops, prefix caching, contiguous KV, several replicas).
`decode_step()` and the decode windows (sim/decode_windows.py) are the same rows for a whole run of steps, held to
the same reference by the same test.
"""

from __future__ import annotations

from sim.decode_windows import DecodeWindows
from sim.disk_tier import DiskTier, disk_blocks
from sim.engine_facts import EngineFacts
from sim.host_tier import HostTier
from sim.kv_groups import HybridKVCacheManager, kv_groups
from sim.kv_manager import KVCacheManager
from sim.metrics import Recorder
from sim.request import Request, Status
from sim.scheduler_base import Scheduler
from sim.scheduler_output import SchedulerOutput
from sim.speculation import Speculation
from sim.static_scheduler import StaticScheduler

__all__ = ["ContinuousScheduler", "Scheduler", "StaticScheduler", "build_scheduler"]


class ContinuousScheduler(DecodeWindows, Scheduler):
    """Iteration-level scheduling (Orca / vLLM): requests join and leave the batch at every step."""

    def schedule(self) -> SchedulerOutput:
        """vLLM v1's `Scheduler.schedule` (vllm/v1/core/sched/scheduler.py, v0.11 to current main): running
        requests first, then waiting ones, unless this step preempted. With chunked prefill off the steps
        stay mixed: a waiting prompt is admitted only whole, into what the running requests left of the
        budget (v0's prefill-only steps are gone from vLLM since 0.11, and from here)."""
        out = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        kv, pool, running = self.kv, self.kv.pool, self.running
        block_size, held_floor = kv.block_size, kv.contiguous_tokens or 0
        scheduled, fast = out.scheduled, self.fast_decode_rows
        # A simulated request's decode blocks enter the prefix cache only on preemption (deferred registration),
        # and nothing does without a prefix cache: a decode filling a block then registers nothing.
        no_registration = not pool.enable_caching or kv.defer_private_blocks
        spec = self.speculation  # speculative decoding: decode rows verify drafts (sim/speculation.py)
        decode_context = num_other_rows = 0  # the fast path's rows are added to out's aggregates in one go
        # Fast rows whose token starts a block: their blocks are drawn together, in row order (the ids one draw
        # per row would give), before anything else takes from the pool.
        starting_block: list[Request] = []
        last_slot = block_size - 1
        for request in running:  # a preemption pops from its tail, which ends the loop there
            if budget <= 0:
                break
            computed = request.num_computed_tokens
            num_prompt = request.num_prompt_tokens
            if fast and computed >= num_prompt and num_prompt + request.num_output_tokens - computed == 1:
                # A decode that needs at most one new block (its token starts one) and registers none: what
                # allocate_slots would do is take that block if there is one (every full block already went
                # through cache_full_blocks, which runs up to the computed tokens after each step), and add()
                # would count a decode row. No free block: allocate_slots and preemption, below.
                held = len(request.block_ids) * block_size
                if (
                    held_floor <= held
                    and (computed % block_size != last_slot or (no_registration and request.prompt_token_ids is None))
                    and (computed < held or (computed == held and pool.num_free_blocks > len(starting_block)))
                ):
                    if computed == held:
                        starting_block.append(request)
                    scheduled.append((request, 1))
                    decode_context += computed
                    budget -= 1
                    continue
            self._take_blocks(starting_block)
            num_new, reserve = min(request.num_tokens - computed, budget), 0
            if spec is not None and computed + 1 == request.num_tokens and computed >= num_prompt:
                num_new, reserve = spec.plan(request, budget)  # its token and its drafts, and the lookahead slots
            if not self._allocate_or_preempt(request, num_new, out, reserve):
                break
            out.add(request, num_new)
            num_other_rows += 1
            budget -= num_new
        self._take_blocks(starting_block)
        num_decodes = len(scheduled) - num_other_rows
        out.add_decodes(num_decodes, decode_context + num_decodes)  # each decode's context: computed + 1
        num_from_running = len(scheduled)  # the running requests before the first one left out
        if self.config.num_scheduler_steps > 1:
            self._multi_step(out)
        elif not out.num_preempted:
            self._schedule_waiting(out)
        self.release_finished()  # held through this plan (hold_finished): N's outputs are processed now
        return self._count_held(out, num_from_running)

    def _multi_step(self, out: SchedulerOutput) -> None:
        """vLLM V0's multi-step scheduling (`--num-scheduler-steps`; LLMEngine.step schedules only when the running
        groups have no steps left, `_has_remaining_steps`): a step of decodes alone starts a block of
        num_scheduler_steps steps, run from this one schedule() (`SequenceGroup.init_multi_step_from_lookahead_slots`:
        a decode gets num_scheduler_steps - 1 lookahead slots, a prompt none, so a step that computes prompt tokens
        is a block of one). Within a block no waiting request is admitted and the host does no scheduling: its
        steps after the first advance their inputs on the GPU (each row's token is still processed on the host:
        `CostModel.block_step_host_s`). A block ends early when every request in it has
        finished. V0 ran a prompt's step without the decodes (they resume in the next block); here the admitted
        prompts join the running decodes in one step, as vLLM's scheduler does since its V1 engine."""
        if self.block_steps_left and out.scheduled:
            self.block_steps_left -= 1
            out.host_scheduled = False
            return
        self.block_steps_left = 0
        if not out.num_preempted:
            self._schedule_waiting(out)
        if out.scheduled and not out.num_prefill_tokens:
            self.block_steps_left = self.config.num_scheduler_steps - 1

    def decode_step(self) -> SchedulerOutput | None:
        """What schedule() gives when every running request decodes one token and the queue's head stays
        blocked (the step right after a decode window): their rows, and one new block for each whose token
        starts one. None when schedule() could do otherwise: a block the pool lacks (preemption), or a full
        block to register (a live request, or registration at allocation)."""
        kv = self.kv
        if kv.pool.enable_caching and not kv.defer_private_blocks:
            return None
        block_size, floor_tokens = kv.block_size, kv.contiguous_tokens or 0
        out = SchedulerOutput()
        scheduled, starting_block, context = out.scheduled, [], 0
        for r in self.running:
            computed = r.num_computed_tokens
            if r.prompt_token_ids is not None:
                return None
            if -(-max(computed + 1, floor_tokens) // block_size) > len(r.block_ids):
                starting_block.append(r)
            scheduled.append((r, 1))
            context += computed + 1
        if len(starting_block) > kv.pool.num_free_blocks:
            return None
        self._take_blocks(starting_block)
        self.release_finished()  # as schedule() does, after its allocations
        out.add_decodes(len(scheduled), context)
        out.tokens_held -= kv.shared_tokens()
        return out

    def _take_blocks(self, requests: list[Request]) -> None:
        """One new block for each of requests (their decode token starts it), in order; empties the list."""
        if requests:
            new_ids = self.kv.pool.get_new_blocks(len(requests))
            for request, block_id in zip(requests, new_ids):
                request.block_ids.append(block_id)
            requests.clear()

    def _count_held(self, out: SchedulerOutput, first_unscheduled: int) -> SchedulerOutput:
        """Running requests left out of this step (budget spent) still hold their tokens."""
        kv = self.kv
        if isinstance(kv, HybridKVCacheManager):
            # The hybrid allocator's groups: every group's slots count, and a sliding group holds only its window's
            # blocks (the contexts once counted against them gave 198% of slots holding tokens).
            new = {r.request_id: n for r, n in out.scheduled}
            out.tokens_held = sum(
                kv.tokens_in_slots(r.num_computed_tokens, r.num_computed_tokens + new.get(r.request_id, 0))
                for r in self.running
            )
            out.tokens_held -= self.kv.pool.num_shared_refs * self.kv.block_size  # shared blocks: once
            return out
        num_new = len(out.scheduled)
        for request in self.running[first_unscheduled : len(self.running) - (num_new - first_unscheduled)]:
            out.tokens_held += request.num_computed_tokens
        out.tokens_held -= self.kv.shared_tokens()  # a shared prefix block holds its tokens once, not per request
        return out

    def _allocate_or_preempt(
        self, request: Request, num_new_tokens: int, out: SchedulerOutput, reserve_tokens: int = 0
    ) -> bool:
        """Find blocks for the request, preempting the most recently admitted requests while the pool is
        short; False when the request itself had to go. A finished request still held (hold_finished) is in
        vLLM's `running` where it was admitted: when it is the most recent, vLLM pops it first, which frees its
        blocks and recomputes nothing (its output is processed as a finish). reserve_tokens: slots held up to that
        many tokens (speculative decoding's lookahead)."""
        while not self.kv.allocate_slots(request, num_new_tokens, reserve_tokens=reserve_tokens):
            held = self.finished_holding
            newest_held = max(held, key=lambda r: r.admission_order) if held else None
            if newest_held is not None and newest_held.admission_order > self.running[-1].admission_order:
                held.remove(newest_held)
                self._free_finished(newest_held)
                continue
            victim = self.running.pop()
            self._preempt(victim)
            out.num_preempted += 1
            if victim is request:
                return False
        return True

    def _preempt(self, request: Request) -> None:
        """Recompute preemption: drop the KV, keep the outputs, go back to the head of the queue."""
        self.kv.free_preempted(request)
        request.status = Status.WAITING
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)

    def _schedule_waiting(self, out: SchedulerOutput) -> None:
        budget = self.config.max_num_batched_tokens - out.num_tokens
        skipped: list[Request] = []  # waiting for their KV from a prefill instance: kept in place (vLLM's skip)
        while self.waiting and budget > 0 and self.num_slots_taken < self.config.max_num_seqs:
            request = self.waiting[0]
            if request.status is Status.WAITING_FOR_REMOTE_KVS:
                skipped.append(self.waiting.popleft())
                continue
            fresh = request.num_computed_tokens == 0
            hits = self.kv.get_computed_blocks(request) if fresh else []
            if request.do_remote_prefill:
                if not self._start_remote_load(request, hits):
                    break
                skipped.append(self.waiting.popleft())
                continue
            num_host = self.kv.get_host_blocks(request, len(hits)) if fresh and self.kv.host is not None else 0
            if num_host:
                if not self._start_host_load(request, hits, num_host):
                    break
                skipped.append(self.waiting.popleft())
                continue
            num_new = request.num_tokens - request.num_computed_tokens - len(hits) * self.kv.block_size
            if not self.config.enable_chunked_prefill and num_new > budget:
                break  # v1 without chunked prefill: a prompt is scheduled whole or not at all
            num_new = min(num_new, budget)
            if self.config.scheduler_reserve_full_isl and not self.kv.full_sequence_fits(request, hits):
                break  # vLLM's admission check: the whole sequence must fit the free blocks
            # Speculative decoding holds lookahead slots for every scheduled request, new ones too (as vLLM)
            reserve = 0 if self.speculation is None else self.speculation.reserve(request, num_new, len(hits))
            if not self.kv.allocate_slots(request, num_new, hits, reserve):
                break
            if self.recorder.prefix is not None and fresh and not request.num_preemptions:
                self.recorder.prefix.admitted(request.num_tokens, len(hits) * self.kv.block_size)
            self._admit(request)
            out.add(request, num_new)
            budget -= num_new
        if skipped:
            self.waiting.extendleft(reversed(skipped))

    def _start_remote_load(self, request: Request, hits: list[int]) -> bool:
        """A decode instance's request whose prompt was computed by a prefill instance (vLLM's scheduler with a
        KV connector, `load_kv_async`): blocks for the whole prompt are allocated (the local prefix-cache hits
        taken, the rest registered only once they arrive: `delay_cache_blocks`), no token is scheduled, and the
        prompt's tokens past the hits are pulled (NixlConnector's `get_num_new_matched_tokens`: the prompt less
        what is computed). False (nothing changed) when they do not fit."""
        kv, num_prompt = self.kv, request.num_prompt_tokens
        if self.config.scheduler_reserve_full_isl and not kv.full_sequence_fits(request, hits):
            return False
        if not kv.allocate_slots(request, 0, hits, reserve_tokens=num_prompt):
            return False
        num_pulled = num_prompt - request.num_computed_tokens
        request.num_computed_tokens = num_prompt
        request.status = Status.WAITING_FOR_REMOTE_KVS
        request.do_remote_prefill = False
        self.on_remote_load(request, num_pulled)
        return True

    def _start_host_load(self, request: Request, hits: list[int], num_host: int) -> bool:
        """A request whose blocks past its GPU hits are in the host tier (vLLM's OffloadingConnector): blocks are
        allocated for the hits and the loaded blocks, no token is scheduled, and the request waits, skipped in the
        queue, until the executor has copied them in (`on_host_load`); then it is scheduled for the rest. False
        (nothing changed) when they do not fit."""
        kv = self.kv
        num_loaded = (len(hits) + num_host) * kv.block_size
        if self.config.scheduler_reserve_full_isl and not kv.full_sequence_fits(request, hits):
            return False
        if not kv.allocate_slots(request, 0, hits, reserve_tokens=num_loaded):
            return False
        num_disk = kv.host.last_disk_hits  # of num_host, those found on the disk tier (sim/disk_tier.py)
        if self.recorder.prefix is not None and not request.num_preemptions:
            bs = kv.block_size
            self.recorder.prefix.admitted(request.num_tokens, len(hits) * bs, (num_host - num_disk) * bs, num_disk * bs)
        request.num_computed_tokens = num_loaded
        request.status = Status.WAITING_FOR_REMOTE_KVS
        kv.host.num_loaded += num_host - num_disk
        kv.host.num_loads += 1
        if num_disk:
            kv.host.disk.num_loaded += num_disk
            kv.host.disk.num_loads += 1
        self.on_host_load(request, num_host)
        return True


def build_scheduler(
    facts: EngineFacts,
    num_gpu_blocks: int,
    recorder: Recorder,
    replica: int = 0,
    fast_paths: bool = True,
    count_blocks_lazily: bool = False,
    seed: int | None = None,
) -> Scheduler:
    """The scheduler and KV manager an engine's settings ask for, over a pool of num_gpu_blocks (both modes).
    fast_paths=False is the tests' reference: every block registered in the prefix cache at allocation, every
    row through allocate_slots and SchedulerOutput.add. count_blocks_lazily: the simulator's (`BlockPool`).
    seed: the workload's, which a speculative engine's acceptance draws descend from (required then)."""
    e = facts.engine
    contiguous = facts.max_model_len if e.kv_cache == "contiguous" else None
    groups = kv_groups(facts)  # sliding-window layers: vLLM's hybrid allocator (sim/kv_groups.py)
    if groups is not None:
        # vLLM's admission cap for a sliding group is the pool sizer's own figure (one source of truth there too)
        cap = facts.sliding_window_blocks
        kv = HybridKVCacheManager(num_gpu_blocks, e.block_size, e.enable_prefix_caching, groups, cap)
    else:
        # A host tier stores every block as the prefix cache registers it: none is deferred (sim/kv_manager.py)
        defer = fast_paths and e.kv_offload is None
        kv = KVCacheManager(
            num_gpu_blocks, e.block_size, e.enable_prefix_caching, contiguous, defer, count_blocks_lazily
        )
        if e.kv_offload is not None:
            block_bytes = e.block_size * facts.kv_bytes_per_token
            kv.host = HostTier(int(e.kv_offload.size_gib * 2**30) // block_bytes, block_bytes, e.kv_offload)
            if e.kv_offload.disk_gib is not None:
                kv.host.disk = DiskTier(disk_blocks(e.kv_offload, block_bytes), block_bytes, e.kv_offload)
            recorder.host_tiers.append(kv.host)
    policy = {"continuous": ContinuousScheduler, "static": StaticScheduler}[e.scheduler]
    scheduler = policy(e, kv, recorder, replica)
    # The fast paths assume a request's blocks only grow; a sliding window frees blocks at every allocation.
    scheduler.fast_decode_rows = fast_paths and groups is None
    if e.speculative is not None:
        if seed is None:
            raise ValueError("a speculative engine's scheduler needs the workload's seed (its acceptance draws)")
        scheduler.speculation = Speculation(e.speculative, facts.model, seed, facts.max_model_len, e.block_size)
        if recorder.spec is None:  # every replica's counts go to the one recorder
            recorder.spec = scheduler.speculation.counts
        scheduler.speculation.counts = recorder.spec
        scheduler.fast_decode_rows = False  # a decode row is 1 + k tokens: the plain path plans it
    return scheduler
