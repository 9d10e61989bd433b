"""One engine as a SimPy process: its scheduler stepped step by step, or a decode window at a time.

The serving model (scheduler, block pool, metrics) is the live engine's; only a step's duration comes
from the cost model, and SimPy's clock advances by it. A decode window, a run of pure-decode steps of the
running requests up to the next arrival, is priced and applied at once (numpy over the window) instead of
one event per step: the result is stepping's, step rows included, but for float sums taken in another order
(a relative 1e-9 at most, property-tested). In an open loop with nobody waiting, a window runs through
requests' last tokens, the batch shrinking as they finish; otherwise it stops one step short of the first,
and that step shares the window's timeout when nothing can happen before it ends.

Async scheduling (vLLM v1's default, `AsyncScheduler` + `EngineCore.step_with_batch_queue`): step N+1 is
scheduled while step N runs, so a request that arrives during step N is first scheduled in step N+2. The
replica keeps such requests aside (`deferred`) until the next schedule() has been made without them, and
step N+1 (pure decode) ends the window the arrival came in. `engine.async_scheduling: false`,
`engine.enforce_eager: true` and the `cpu` device are serial: it joins step N+1.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import simpy

from sim.cost_model import IDLE_WAKE_AFTER_S, CostModel
from sim.decode_windows import WindowStart
from sim.draft_cost import DraftCost
from sim.host_link import host_link_of
from sim.host_tier import mark_first_scheduled
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import ContinuousScheduler, Scheduler
from sim.scheduler_output import SchedulerOutput

# Steps of a decode window priced first when no window before it gives a pace to guess from (most windows
# end sooner, at an arrival).
WINDOW_PREFIX_STEPS = 64


class Window(NamedTuple):
    """The steps of a decode window, one array element each."""

    durations: np.ndarray  # seconds
    host: np.ndarray | float  # seconds (one value: every step's)
    device: np.ndarray  # seconds
    rows: int | np.ndarray  # requests decoding in each step (one int: every step's)
    context: np.ndarray  # context tokens after the step, summed over the rows
    elapsed: np.ndarray  # cumulative durations
    after: tuple[float, float] | None  # (seconds, device seconds) of the step after the window, if priced
    # Async: the window's last step is the one after an arrival's (pure decode: the arrival misses its schedule)
    arrival_step: bool
    through_finishes: bool  # requests may sample their last tokens in the window
    start: WindowStart  # the running requests' counts before it


class Replica:
    """One engine: its scheduler stepped by a SimPy process."""

    def __init__(
        self,
        env: simpy.Environment,
        scheduler: Scheduler,
        cost: CostModel,
        recorder: Recorder,
        next_arrival_s: Callable[[], float],
        on_finished: Callable[[Request], None],
        fast_forward: bool = True,
        through_finishes: bool = False,
        drafting: DraftCost | None = None,
    ) -> None:
        self.env, self.scheduler, self.cost, self.recorder = env, scheduler, cost, recorder
        # Multi-step blocks (engine.num_scheduler_steps > 1) are stepped: a window would cross their boundaries.
        # Speculative decoding: each step also drafts (sim/draft_cost.py), and a decode row verifies 1 + k tokens, so
        # no step is a decode window's (one token per row): every step is stepped.
        self.drafting = drafting
        self.fast_forward = (
            fast_forward
            and isinstance(scheduler, ContinuousScheduler)
            and scheduler.config.num_scheduler_steps == 1
            and drafting is None
        )
        # Windows may run through requests' last tokens (the batch shrinks) when a finish changes nothing else:
        # an open loop (this flag: no user sends a request on a reply's end), and, checked at each window,
        # nobody waiting (a finish would admit them) and no prefix block shared (its repeats leave the tokens
        # held as the sharers finish).
        self.through_finishes = through_finishes
        # A window in flight through finishes: its steps' end times and each running request's tokens left to
        # sample. Those finishing in it count as outstanding until their last step ends (read by the router only).
        self.window_in_flight: tuple[np.ndarray, list[int]] | None = None
        self.window_step_s = 0.0  # the last window's last step: how many steps the next arrival leaves, roughly
        self.next_arrival_s = next_arrival_s
        self.on_finished = on_finished
        self.idle: simpy.Event | None = None
        # Async scheduling: None while the engine is idle (a request goes straight to the scheduler);
        # while a step runs, the requests that arrived since the last schedule() (they miss the next one).
        self.overlapped = not cost.serial
        self.deferred: list[Request] | None = None
        # ... and a request finished in step N holds its slot and blocks while step N+1 is planned (vLLM's
        # AsyncScheduler: sim/scheduler_base.py, hold_finished).
        scheduler.hold_finished = self.overlapped and isinstance(scheduler, ContinuousScheduler)
        self.host_link = host_link_of(env, scheduler, self.submit)  # a host KV tier's loads; None: no tier
        env.process(self.run())

    def submit(self, request: Request) -> None:
        if self.deferred is not None:
            self.deferred.append(request)
            return
        self.scheduler.add_request(request)
        if self.idle is not None and not self.idle.triggered:
            self.idle.succeed()

    @property
    def num_outstanding(self) -> int:
        """Requests sent here and not finished, those not yet seen by the scheduler included (a window in
        flight retires its finished requests only at its end: those finished by now do not count)."""
        num_finished = 0
        if self.window_in_flight is not None:
            ends, left, now = *self.window_in_flight, self.env.now
            num_finished = sum(1 for n in left if n <= len(ends) and ends[n - 1] <= now)
        return self.scheduler.num_unfinished + len(self.deferred or ()) - num_finished

    def _release_deferred(self) -> None:
        for request in self.deferred or ():
            self.scheduler.add_request(request)
        self.deferred = [] if self.overlapped else None

    def run(self):
        env, sched = self.env, self.scheduler
        after_idle = True  # async: the first step after idle has no step to hide its host side behind
        woke = False  # the engine waited for work, IDLE_WAKE_AFTER_S or longer, before this step
        # A window ended with arrivals joining the queue: the next step admits them, almost always, so no window
        # is looked for (one stepped step where the queue's head is blocked: stepping is always exact).
        admitting = False
        # A disk tier behind the host tier finds a block once its write has ended (sim/disk_tier.py): its clock
        disk = self.host_link.tier.disk if self.host_link is not None else None
        while True:
            if not sched.num_unfinished:
                # The last step finished every request: nothing was scheduled ahead of the requests that
                # arrived during it, so the next schedule() sees them, and its outputs were processed (those
                # finished in it are freed).
                sched.release_finished()
                pending, self.deferred = self.deferred or (), None
                for request in pending:
                    sched.add_request(request)
                after_idle = True  # drained: the next step's host side has no step to hide behind
                if not sched.num_unfinished:
                    self.idle, idle_from = env.event(), env.now
                    yield self.idle
                    woke = env.now - idle_from >= IDLE_WAKE_AFTER_S
                    continue
            # A window never starts right after idle: the request that woke the engine is still waiting.
            bound = 0
            if self.fast_forward and not self.deferred and not admitting:
                through = self.through_finishes and not sched.waiting and not sched.kv.pool.num_shared_refs
                bound, start = sched.decode_window_bound(through)
            if bound:
                window = self._window(bound, through, start)
                if len(window.durations) >= 2:
                    if self.overlapped:
                        self.deferred = []
                    yield from self._decode_window(window)
                    admitting = window.arrival_step
                    continue
            admitting = False
            holding = bool(sched.finished_holding)
            if disk is not None:
                disk.advance(env.now)
            out = sched.schedule()
            if not out.scheduled and holding:
                # Only the finished requests' held slots or blocks kept the queue's head out (vLLM plans an empty
                # step N+1, preempting maybe): once N's outputs free them the head is planned, with no step to hide
                # that behind; the empty plan's preemptions are this step's.
                preempted = out.num_preempted
                out, after_idle = sched.schedule(), True
                out.num_preempted += preempted
            if not out.scheduled and sched.awaits_kv_transfers:
                # A fleet's engine (sim/fleet.py) whose queue waits on KV pulls, or on blocks a pull will free: idle
                # until one ends (sim.fleet_dp.wake_rank) or a request comes
                pending, self.deferred = self.deferred or (), None
                for request in pending:
                    sched.add_request(request)
                if not pending:
                    self.idle, idle_from = env.event(), env.now
                    yield self.idle
                    woke = env.now - idle_from >= IDLE_WAKE_AFTER_S
                after_idle = True
                continue
            if not out.scheduled:
                raise RuntimeError(
                    f"no request can be scheduled at t={env.now:.3f}s with "
                    f"{sched.kv.pool.num_free_blocks} free blocks: the pool is too small"
                )
            yield from self._step(out, after_idle, woke=woke)
            after_idle = woke = False

    def _step(
        self, out: SchedulerOutput, after_idle: bool, priced: tuple[float, float] | None = None, woke: bool = False
    ):
        """Run one scheduled step: release the arrivals kept aside, price it (unless `priced` gives its (step,
        device) seconds; `woke`: the engine waited for work before it, see CostCoefficients.idle_wake_s),
        advance the clock, update."""
        env, sched, cost = self.env, self.scheduler, self.cost
        self._release_deferred()  # arrivals during the previous step: too late for this one
        start, blocks_in_use = env.now, sched.kv.pool.num_used_blocks
        out.start_s = start
        if self.host_link is not None:
            mark_first_scheduled(out, start)
        host = (
            cost.host_s(out.num_seqs, out.num_prompt_rows)
            if out.host_scheduled
            else cost.block_step_host_s(out.num_seqs)
        )
        if priced is None:
            # The LM head runs over every sampled row and every verified draft (the rejection sampler's logits)
            device = cost.device_s(
                out.num_tokens, out.num_seqs, out.num_sampled + out.num_draft_tokens, out.attention_pairs,
                out.sum_context_tokens,
            )  # fmt: skip
            if woke and cost.idle_wake_s:
                device += cost.idle_wake_s
            if self.drafting is not None:
                # Drafting follows the forward in the step, on its critical path (the n-gram lookup on the host)
                draft = self.drafting.step_s(out)
                device += draft
                counts = sched.speculation.counts
                counts.draft_s += draft
                counts.step_s += float(cost.combine(host, device, after_idle))
            duration, device = float(cost.combine(host, device, after_idle)), float(device)
        else:
            duration, device = priced
        yield env.timeout(duration)
        yield from self._end_step(out, start, duration, blocks_in_use, host, device)

    def _end_step(self, out: SchedulerOutput, start: float, duration: float, blocks_in_use: int, host, device):
        finished = self.scheduler.update(out, self.env.now)
        self.scheduler.record_step(out, start, duration, blocks_in_use, host, device)
        for request in finished:
            self.on_finished(request)
        if finished:
            # Let the users whose replies just completed send their next request (or start thinking)
            # before this engine plans its next step, as they would between two real steps.
            yield self.env.timeout(0)

    def _window(self, bound: int, through_finishes: bool, start: WindowStart) -> Window:
        """The next steps of a decode window, cut before the first step that would start at or after the next
        arrival anywhere (it changes the batch), and the step after them if it was priced."""
        until_arrival_s = self.next_arrival_s() - self.env.now
        # Most windows end at an arrival after a few dozen steps: price the steps up to it at the last window's
        # pace (with a margin: a shrinking batch steps faster), then 4x as many while the arrival is not among
        # them, up to all `bound` steps and the one after (a prefix of the same arrays: the same values). The
        # step after the window is the pure-decode step that follows it when someone finishes in it or an
        # arrival waits for it: priced here, with the same operations as one step alone. A window that runs to
        # the last request's last token has no step after it.
        horizon = bound + 1
        if through_finishes:
            horizon = min(horizon, max(start.left))
        num_priced = min(horizon, WINDOW_PREFIX_STEPS)
        if self.window_step_s and until_arrival_s < math.inf:
            num_priced = min(horizon, int(until_arrival_s / self.window_step_s * 1.25) + 4)
        while True:
            rows, context = self.scheduler.decode_window_steps(start, num_priced)
            host, device, durations = self._price(rows, context)
            elapsed = durations.cumsum()
            num_steps = int((elapsed - durations).searchsorted(until_arrival_s, side="left"))
            if num_steps < num_priced or num_priced == horizon:
                n = min(num_steps, bound)
                # Async, an arrival during the step n - 1 is first scheduled in step n + 1: step n is still pure
                # decode of the running requests (those that finished in step n - 1 gone) and joins the window.
                arrival_step = self.overlapped and 1 <= num_steps < min(bound, num_priced)
                if arrival_step:
                    n += 1
                after = (float(durations[n]), float(device[n])) if n < num_priced and not arrival_step else None
                host = host if isinstance(host, float) else host[:n]
                self.window_step_s = float(durations[n - 1]) if n else self.window_step_s
                return Window(
                    durations[:n],
                    host,
                    device[:n],
                    rows if isinstance(rows, int) else rows[:n],
                    context[:n],
                    elapsed[:n],
                    after,
                    arrival_step,
                    through_finishes,
                    start,
                )
            num_priced = min(4 * num_priced, horizon)

    def _price(self, rows: int | np.ndarray, context: np.ndarray) -> tuple[np.ndarray | float, np.ndarray, np.ndarray]:
        """(host, device, step) seconds of decode steps of these rows and summed contexts; host is one value when
        the rows do not change."""
        num_rows = rows if isinstance(rows, int) or rows[0] != rows[-1] else int(rows[0])  # rows only shrink
        host = self.cost.host_s(num_rows)
        return host, *self.cost.decode_window_s(num_rows, context, host)

    def _decode_window(self, window: Window):
        sched, env, now = self.scheduler, self.env, self.env.now
        durations = window.durations
        num_steps = len(durations)
        # Someone finishes in the step after the window (it stops one step short).
        finishing = window.after is not None and num_steps + 1 in window.start.left
        num_waiting = len(sched.waiting)  # requests blocked in the queue (a saturated engine), or none
        if not num_waiting:
            ends = now + window.elapsed
        else:
            # The clock advances step by step, as when stepping one by one, so every time is the same to the
            # last bit (still no per-request work).
            ends = np.cumsum(np.concatenate(([now], durations)))[1:]
        last_end = float(ends[-1])
        if window.through_finishes:
            self.window_in_flight = ends, window.start.left
        if not num_waiting and finishing:
            # The finishing step follows at once: when nothing else can happen before it ends (no arrival),
            # the window and that step take one timeout instead of two, landing where they would.
            clock = now + (last_end - now)  # where the window's timeout would land the clock
            step_end = clock + window.after[0]
            if self.next_arrival_s() > step_end and now + (step_end - now) == step_end:
                self._end_window(window, ends, num_waiting)
                out = sched.decode_step()  # what _steps_after_window would take
                if out is None:
                    yield env.timeout(last_end - now)
                    return
                blocks_in_use = sched.kv.pool.num_used_blocks
                yield env.timeout(step_end - now)
                duration, device = window.after
                host = self.cost.host_s(out.num_seqs, out.num_prompt_rows)
                yield from self._end_step(out, clock, duration, blocks_in_use, host, device)
                return
        if now + (last_end - now) == last_end or not num_waiting:
            yield env.timeout(last_end - now)  # SimPy's clock lands on last_end exactly
        else:
            for duration in durations.tolist():
                yield env.timeout(duration)
        if window.arrival_step:
            self._release_deferred_by(float(ends[-2]))
        if self._end_window(window, ends, num_waiting):
            yield env.timeout(0)  # as after a finishing step: the users whose replies completed go first
        if (
            window.after is not None
            and self._steps_after_window(num_waiting, finishing)
            and (out := sched.decode_step()) is not None
        ):
            yield from self._step(out, after_idle=False, priced=window.after)  # a window never follows idle

    def _release_deferred_by(self, end_s: float) -> None:
        """The arrivals kept aside that came by end_s (during the step that ended then) join the queue: the
        step after it, scheduled without them, is over. Later ones stay aside until the next schedule()."""
        pending = self.deferred or []
        self.deferred = [r for r in pending if r.arrival_s > end_s]
        for request in pending:
            if request.arrival_s <= end_s:
                self.scheduler.add_request(request)

    def _end_window(self, window: Window, ends: np.ndarray, num_waiting: int) -> bool:
        """Apply the window to the requests and record its steps; True when someone finished in it."""
        sched = self.scheduler
        finished, blocks = sched.advance_decode_window(window.start, ends, window.rows)
        self.window_in_flight = None
        shared = sched.kv.shared_tokens()  # tokens held once for several requests: a window shares no new block
        self.recorder.decode_window(
            replica=sched.replica,
            end_s=ends,
            duration_s=window.durations,
            num_rows=window.rows,
            num_running_after=len(sched.running),
            num_waiting=num_waiting,
            num_waiting_after=len(sched.waiting),
            sum_context_tokens=window.context,
            kv_blocks_used=blocks,
            host_s=window.host,
            device_s=window.device,
            tokens_held=window.context - shared if shared else window.context,
        )
        for request in finished:
            self.on_finished(request)
        return bool(finished)

    def _steps_after_window(self, num_waiting: int, finishing: bool) -> bool:
        """The next step is stepped and pure decode, as run()'s loop would find: someone finishes in it
        (`finishing`: a window stops one step short), or (async) a request arrived during the window's last step
        and is kept aside until that step is scheduled. Serial, an arrival joins the queue at once and may be
        admitted: only without one."""
        if self.overlapped:
            return finishing or (bool(self.deferred) and bool(self.scheduler.running))
        return finishing and len(self.scheduler.waiting) == num_waiting
