"""What both scheduling policies share: the queues, update() after a step, the step's row, finishing and
admitting requests, and holding finished requests' slots and blocks under async scheduling. The policies:
`sim/scheduler.py` (continuous, vLLM v1) and `sim/static_scheduler.py` (static batches)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

from sim.config import EngineConfig
from sim.kv_manager import KVCacheManager
from sim.metrics import Recorder
from sim.request import Request, Status
from sim.scheduler_output import SchedulerOutput
from sim.speculation import Speculation


class Scheduler(ABC):
    """State and bookkeeping shared by both policies; subclasses decide the batch."""

    def __init__(self, engine: EngineConfig, kv: KVCacheManager, recorder: Recorder, replica: int = 0) -> None:
        self.config = engine
        self.kv = kv
        # schedule()'s fast path for decode rows that need at most a block from the pool; False in the tests'
        # reference (build_scheduler with fast_paths=False), which takes allocate_slots and add() for each.
        self.fast_decode_rows = True
        self.recorder = recorder
        self.replica = replica  # for the step rows, when several engines share one recorder
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        # vLLM's async scheduling (`AsyncScheduler`, `EngineCore.step_with_batch_queue`) plans step N+1 before step
        # N's outputs are processed: a request that samples its last token in step N is left out of N+1 (its
        # `num_output_placeholders` say it is done) but stays in `running`, holding its max_num_seqs slot and its
        # blocks, until N's outputs free it, after N+1 is planned. With hold_finished (the simulator's replica sets
        # it when steps overlap; serial engines, ours live included, free at once) a finished request's reply is
        # complete at its last token, as before, but its slot and blocks are held here until the end of the next
        # schedule() (or decode_step()), in the order it finished.
        self.hold_finished = False
        self.finished_holding: list[Request] = []
        self.num_admitted = 0  # admissions so far: each request's admission_order, vLLM's `running` order
        # Multi-step scheduling (engine.num_scheduler_steps > 1, vLLM V0): steps of the current block still to run
        # after this one; none is admitted until they have.
        self.block_steps_left = 0
        self.speculation: Speculation | None = None  # speculative decoding (sim/speculation.py); None: off
        # Disaggregated serving (sim/fleet.py sets these on a fleet's prefill and decode engines): a finished request
        # whose KV a decode instance pulls keeps its blocks here until the pull is done (vLLM's delay_free_blocks);
        # on_remote_load(request, num_tokens) is told of each pull a decode instance starts.
        self.sending: dict[int, Request] = {}
        self.on_remote_load: Callable[[Request, int], None] | None = None
        # A host KV tier (engine.kv_offload): on_host_load(request, num_blocks) is told of each load the scheduler
        # starts; the executor copies them in and hands the request back (add_request) once they are there.
        self.on_host_load: Callable[[Request, int], None] | None = None

    def add_request(self, request: Request) -> None:
        if request.status is Status.WAITING_FOR_REMOTE_KVS:  # its pulled KV has arrived: it stays in the queue
            self._finish_remote_load(request)
            return
        self.waiting.append(request)

    def _finish_remote_load(self, request: Request) -> None:
        """vLLM's `Scheduler._update_waiting_for_remote_kv`: the pulled blocks enter the prefix cache and the request
        waits to be scheduled with its prompt computed but for the last token, recomputed here to sample."""
        computed = min(request.num_computed_tokens, request.num_tokens)
        if computed == request.num_tokens:
            computed -= 1
        request.num_computed_tokens = computed
        self.kv.cache_full_blocks(request, computed)
        request.status = Status.WAITING

    @property
    def awaits_kv_transfers(self) -> bool:
        """Blocks held for pulls (a prefill engine's), or requests waiting for theirs (a decode engine's)."""
        return bool(self.sending) or any(r.status is Status.WAITING_FOR_REMOTE_KVS for r in self.waiting)

    def finish_sending(self, request: Request) -> None:
        """The decode instance has pulled the request's KV: its blocks are freed (vLLM's finished_sending)."""
        self.kv.free(self.sending.pop(request.request_id))

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running)

    @property
    def num_slots_taken(self) -> int:
        """Requests that count against max_num_seqs: the running ones and the finished ones still held."""
        return len(self.running) + len(self.finished_holding)

    def release_finished(self, num_requests: int | None = None) -> None:
        """Free the finished requests held since the last schedule() (hold_finished), or the first num_requests of
        them: their blocks join the free queue's back in the order they finished, after the allocations of the
        schedule() they were held through."""
        released = self.finished_holding[:num_requests]
        for request in released:
            self._free_finished(request)
        del self.finished_holding[: len(released)]

    @abstractmethod
    def schedule(self) -> SchedulerOutput:
        """The next step's batch; admission, block allocation and preemption happen here."""

    def update(self, output: SchedulerOutput, now_s: float, sampled: dict[int, int] | None = None) -> list[Request]:
        """Advance the scheduled requests after their step ended at now_s; returns those that finished.

        `sampled` holds the live engine's token per request; the simulator passes None.
        """
        finished = []
        # The step's inter-token gaps (of the requests that sampled before), as runs of rows whose previous
        # token came at the same time: most rows sampled theirs at the previous step's end, so a step has one or
        # two runs, and the gap histogram bins a gap per run instead of per row.
        since_s, counts = [], []
        run_since_s, run = None, 0
        for request, num_new_tokens in output.scheduled:
            computed = request.num_computed_tokens = request.num_computed_tokens + num_new_tokens
            num_output = request.num_output_tokens
            gained = 1
            if computed != request.num_prompt_tokens + num_output:
                if computed < request.num_prompt_tokens + num_output:
                    if request.first_scheduled_s is None:
                        request.first_scheduled_s = output.start_s
                    continue  # mid-prompt chunk: nothing sampled
                # drafts verified (sim/speculation.py): the rejected ones come off the computed tokens
                num_drafts = computed - request.num_prompt_tokens - num_output
                gained, accepted = self.speculation.verified(request, num_drafts)
                if sampled is not None:  # the accepted drafts and the target's token after them (VerifiedTokens)
                    request.output_token_ids += sampled[request.request_id].output(accepted, gained)
            elif sampled is not None:
                request.output_token_ids.append(sampled[request.request_id])
            num_output = request.num_output_tokens = num_output + gained
            last_s = request.last_token_s
            if last_s is None:
                request.first_token_s = now_s
                if request.first_scheduled_s is None:
                    request.first_scheduled_s = output.start_s
            elif last_s == run_since_s:
                run += 1
            else:
                if run:
                    since_s.append(run_since_s)
                    counts.append(run)
                run_since_s, run = last_s, 1
            request.last_token_s = now_s
            if num_output >= request.max_output_tokens:
                finished.append(request)
        if run:
            since_s.append(run_since_s)
            counts.append(run)
            self.recorder.token_gaps_since(now_s, since_s, counts)
        return self._retire(finished, now_s)

    def record_step(
        self,
        out: SchedulerOutput,
        start_s: float,
        duration_s: float,
        blocks_in_use: int,
        host_s: float = 0.0,
        device_s: float = 0.0,
    ) -> None:
        """One step's row, after update(): queue lengths as they are now, blocks as they were during it."""
        self.recorder.step(
            replica=self.replica,
            start_s=start_s,
            duration_s=duration_s,
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            num_prefill_tokens=out.num_prefill_tokens,
            num_decode_requests=out.num_decode_requests,
            num_sampled=out.num_sampled,
            sum_context_tokens=out.sum_context_tokens,
            attention_pairs=out.attention_pairs,
            kv_blocks_used=blocks_in_use,
            num_preemptions=out.num_preempted,
            tokens_held=out.tokens_held,
            num_tokens=out.num_tokens,
            num_seqs=out.num_seqs,
            host_s=host_s,
            device_s=device_s,
        )

    def _retire(self, done: list[Request], now_s: float) -> list[Request]:
        for request in done:
            self._finish(request, now_s)
        for request in done:  # a few per step: list.remove beats rebuilding the list
            self.running.remove(request)
        return done

    def _finish(self, request: Request, now_s: float) -> None:
        self._complete(request, now_s)
        if self.hold_finished:
            self.finished_holding.append(request)
        else:
            self._free_finished(request)

    def _free_finished(self, request: Request) -> None:
        """A finished request's blocks are freed, or kept until a decode instance has pulled them."""
        if request.do_remote_decode:
            self.sending[request.request_id] = request
        else:
            self.kv.free(request)

    def _complete(self, request: Request, now_s: float) -> None:
        """The reply is complete: the request's metrics are final (its KV may outlive it, in static)."""
        request.status = Status.FINISHED
        request.finished_s = now_s
        request.spec_draws = None
        self.recorder.finished(request)

    def _admit(self, request: Request) -> None:
        self.waiting.popleft()
        self.running.append(request)
        request.status = Status.RUNNING
        self.num_admitted += 1
        request.admission_order = self.num_admitted
