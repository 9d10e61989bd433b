"""The SimPy driver: arrivals, closed-loop users, a router and one engine process per replica.

The serving model (scheduler, block pool, metrics) is the live engine's; only a step's duration comes
from the cost model, and SimPy's clock advances by it. A run of identical pure-decode steps between two
events is priced and applied at once (numpy over the window) instead of one event per step: the result
is the same as stepping them one by one, step rows included. The step that ends a window (someone
finishes in it) shares the window's timeout when nothing can happen before it ends.

Async scheduling (vLLM v1's default, `AsyncScheduler` + `EngineCore.step_with_batch_queue`): step N+1 is
scheduled while step N runs, so a request that arrives during step N is first scheduled in step N+2. The
replica keeps such requests aside (`deferred`) until the next schedule() has been made without them.
`engine.enforce_eager: true` (and the `cpu` device) is serial: it joins step N+1.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import simpy

from sim.config import Scenario
from sim.cost_model import CostCoefficients, CostModel
from sim.kv_groups import kv_pool_blocks
from sim.memory import MemoryBreakdown, memory_breakdown
from sim.metrics import Recorder
from sim.request import Request
from sim.scheduler import ContinuousScheduler, Scheduler, SchedulerOutput, build_scheduler
from sim.workload import Workload, generate_workload, make_request


@dataclass
class SimResult:
    scenario: Scenario
    memory: MemoryBreakdown
    workload: Workload
    recorder: Recorder
    cost_model: CostModel


WINDOW_PREFIX_STEPS = 64  # steps of a decode window priced first (most windows end sooner, at an arrival)


class Window(NamedTuple):
    """The steps of a decode window, one array element each."""

    durations: np.ndarray  # seconds
    host: float  # seconds, every step's
    device: np.ndarray  # seconds
    context: np.ndarray  # context tokens after the step, summed over the rows
    elapsed: np.ndarray  # cumulative durations
    after: tuple[float, float] | None  # (seconds, device seconds) of the step after the window, if priced


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
    ) -> None:
        self.env, self.scheduler, self.cost, self.recorder = env, scheduler, cost, recorder
        self.fast_forward = fast_forward and isinstance(scheduler, ContinuousScheduler)
        self.next_arrival_s = next_arrival_s
        self.on_finished = on_finished
        self.idle: simpy.Event | None = None
        # Async scheduling: None while the engine is idle (a request goes straight to the scheduler);
        # while a step runs, the requests that arrived since the last schedule() (they miss the next one).
        self.overlapped = not cost.serial
        self.deferred: list[Request] | None = None
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
        """Requests sent here and not finished, those not yet seen by the scheduler included."""
        return self.scheduler.num_unfinished + len(self.deferred or ())

    def _release_deferred(self) -> None:
        for request in self.deferred or ():
            self.scheduler.add_request(request)
        self.deferred = [] if self.overlapped else None

    def run(self):
        env, sched = self.env, self.scheduler
        after_idle = True  # async: the first step after idle has no step to hide its host side behind
        while True:
            if not sched.num_unfinished:
                # The last step finished every request: nothing was scheduled ahead of the requests that
                # arrived during it, so the next schedule() sees them.
                pending, self.deferred = self.deferred or (), None
                for request in pending:
                    sched.add_request(request)
                after_idle = True  # drained: the next step's host side has no step to hide behind
                if not sched.num_unfinished:
                    self.idle = env.event()
                    yield self.idle
                    continue
            # A window never starts right after idle: the request that woke the engine is still waiting.
            if self.fast_forward and not self.deferred and (bound := sched.decode_window_bound()):
                window = self._window(bound)
                if len(window.durations) >= 2:
                    if self.overlapped:
                        self.deferred = []
                    yield from self._decode_window(window)
                    continue
            out = sched.schedule()
            if not out.scheduled:
                raise RuntimeError(
                    f"no request can be scheduled at t={env.now:.3f}s with "
                    f"{sched.kv.pool.num_free_blocks} free blocks: the pool is too small"
                )
            yield from self._step(out, after_idle)
            after_idle = False

    def _step(self, out: SchedulerOutput, after_idle: bool, priced: tuple[float, float] | None = None):
        """Run one scheduled step: release the arrivals kept aside, price it (unless `priced` gives its (step,
        device) seconds), advance the clock, update."""
        env, sched, cost = self.env, self.scheduler, self.cost
        self._release_deferred()  # arrivals during the previous step: too late for this one
        start, blocks_in_use = env.now, sched.kv.pool.num_used_blocks
        host = cost.host_s(out.num_seqs)
        if priced is None:
            device = cost.device_s(
                out.num_tokens, out.num_seqs, out.num_sampled, out.attention_pairs, out.sum_context_tokens
            )
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

    def _window(self, bound: int) -> Window:
        """The next steps of a decode window, cut before the first step that would start at or after the next
        arrival anywhere (it changes the batch), and the step after them if it was priced."""
        rows = len(self.scheduler.running)
        context_now = sum(r.num_computed_tokens for r in self.scheduler.running)
        host = self.cost.host_s(rows)
        until_arrival_s = self.next_arrival_s() - self.env.now
        # Most windows end at an arrival after a few dozen steps: price a short prefix first, all `bound` steps
        # (and the one after) only if the arrival is not among them (a prefix of the same arrays: the same
        # values). The step after the window is the pure-decode step that follows it when someone finishes in
        # it or an arrival waits for it: priced here, with the same operations as one step alone.
        num_priced = min(bound + 1, WINDOW_PREFIX_STEPS)
        while True:
            context = np.arange(context_now + rows, context_now + rows * (num_priced + 1), rows)
            device, durations = self.cost.decode_window_s(rows, context, host)
            elapsed = durations.cumsum()
            num_steps = int((elapsed - durations).searchsorted(until_arrival_s, side="left"))
            if num_steps < num_priced or num_priced == bound + 1:
                n = min(num_steps, bound)
                after = (float(durations[n]), float(device[n])) if n < num_priced else None
                return Window(durations[:n], host, device[:n], context[:n], elapsed[:n], after)
            num_priced = bound + 1

    def _decode_window(self, window: Window):
        sched, env, now = self.scheduler, self.env, self.env.now
        durations = window.durations
        num_steps = len(durations)
        # Someone finishes in the step after the window (it stops one step short): checked before the window
        # changes the counts.
        finishing = min([r.max_output_tokens - r.num_output_tokens for r in sched.running]) - num_steps == 1
        blocks = sched.allocate_decode_window(num_steps)
        num_waiting = len(sched.waiting)  # requests blocked in the queue (a saturated engine), or none
        if not num_waiting:
            ends = now + window.elapsed
        else:
            # The clock advances step by step, as when stepping one by one, so every time is the same to the
            # last bit (still no per-request work).
            ends = np.cumsum(np.concatenate(([now], durations)))[1:]
        last_end = float(ends[-1])
        if not num_waiting and finishing and window.after is not None:
            # The finishing step follows at once: when nothing else can happen before it ends (no arrival),
            # the window and that step take one timeout instead of two, landing where they would.
            clock = now + (last_end - now)  # where the window's timeout would land the clock
            step_end = clock + window.after[0]
            if self.next_arrival_s() > step_end and now + (step_end - now) == step_end:
                self._end_window(window, ends, blocks, num_waiting)
                out = sched.decode_step()  # what _steps_after_window would take
                if out is None:
                    yield env.timeout(last_end - now)
                    return
                blocks_in_use = sched.kv.pool.num_used_blocks
                yield env.timeout(step_end - now)
                duration, device = window.after
                yield from self._end_step(out, clock, duration, blocks_in_use, window.host, device)
                return
        if now + (last_end - now) == last_end or not num_waiting:
            yield env.timeout(last_end - now)  # SimPy's clock lands on last_end exactly
        else:
            for duration in durations.tolist():
                yield env.timeout(duration)
        self._end_window(window, ends, blocks, num_waiting)
        if self._steps_after_window(num_waiting) and (out := sched.decode_step()) is not None:
            yield from self._step(out, after_idle=False, priced=window.after)  # a window never follows idle

    def _end_window(self, window: Window, ends: np.ndarray, blocks: np.ndarray, num_waiting: int) -> None:
        sched = self.scheduler
        sched.apply_decode_window(ends)
        shared = sched.kv.shared_tokens()  # tokens held once for several requests: a window shares no new block
        self.recorder.decode_window(
            replica=sched.replica,
            end_s=ends,
            duration_s=window.durations,
            num_running=len(sched.running),
            num_waiting=num_waiting,
            num_waiting_after=len(sched.waiting),
            sum_context_tokens=window.context,
            kv_blocks_used=blocks,
            host_s=window.host,
            device_s=window.device,
            tokens_held=window.context - shared if shared else window.context,
            one_by_one=num_waiting > 0,
        )

    def _steps_after_window(self, num_waiting: int) -> bool:
        """The next step is stepped and pure decode, as run()'s loop would find: someone finishes in it (a window
        stops one step short), or (async) a request arrived during the window's last step and is kept aside
        until that step is scheduled. Serial, an arrival joins the queue at once and may be admitted: only
        without one."""
        finishing = min([r.max_output_tokens - r.num_output_tokens for r in self.scheduler.running]) == 1
        if self.overlapped:
            return finishing or bool(self.deferred)
        return finishing and len(self.scheduler.waiting) == num_waiting


class Simulation:
    """Wires arrivals (open loop) or users (closed loop) to replicas through a router."""

    def __init__(
        self,
        scenario: Scenario,
        coefficients: CostCoefficients | None = None,
        record_steps: bool = True,
        progress: Callable[[int, int], None] | None = None,
        fast_forward: bool = True,
        steps_sink: Callable[[dict[str, np.ndarray]], None] | None = None,
    ) -> None:
        self.scenario = scenario
        self.memory = memory_breakdown(scenario)
        self.workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
        self.cost = CostModel(scenario, coefficients)
        num_blocks = kv_pool_blocks(scenario, self.memory)  # sliding-window groups: vLLM's pool of layer slots
        self.recorder = Recorder(num_blocks, scenario.engine.block_size, record_steps, steps_sink)
        self.progress = progress
        self.env = simpy.Environment()
        self.num_finished = 0
        self.next_index = 0  # of the workload: the next request to issue
        self.thinking_until: list[float] = []  # closed loop: heap of users' next request times
        self.done_events: dict[int, simpy.Event] = {}
        self.round_robin = itertools.count()
        # A closed loop over several replicas: a reply finishing on one replica sends a request to another,
        # which may be in the middle of a decode window; windows are not interrupted, so step there.
        closed_loop = self.workload.arrival_s is None
        fast_paths = fast_forward  # False: the reference, every fast path off (the tests compare with it)
        fast_forward = fast_forward and not (closed_loop and scenario.hardware.replicas > 1)
        self.replicas = [
            Replica(
                self.env,
                build_scheduler(scenario, num_blocks, self.recorder, index, fast_paths),
                self.cost,
                self.recorder,
                self.next_arrival_s,
                self.on_finished,
                fast_forward,
            )
            for index in range(scenario.hardware.replicas)
        ]

    def next_arrival_s(self) -> float:
        wl = self.workload
        if wl.arrival_s is not None:
            return float(wl.arrival_s[self.next_index]) if self.next_index < len(wl) else math.inf
        return self.thinking_until[0] if self.thinking_until else math.inf

    def route(self, request: Request) -> None:
        if self.scenario.hardware.router == "least_outstanding":
            replica = min(self.replicas, key=lambda r: r.num_outstanding)
        else:
            replica = self.replicas[next(self.round_robin) % len(self.replicas)]
        replica.submit(request)

    def on_finished(self, request: Request) -> None:
        self.num_finished += 1
        if self.progress and (self.num_finished % 256 == 0 or self.num_finished == len(self.workload)):
            self.progress(self.num_finished, len(self.workload))
        event = self.done_events.pop(request.request_id, None)
        if event is not None:
            event.succeed()

    def arrivals(self):
        times = self.workload.arrival_s
        while self.next_index < len(self.workload):
            index = self.next_index
            if times[index] > self.env.now:
                yield self.env.timeout(float(times[index]) - self.env.now)
            self.next_index += 1
            self.route(make_request(self.workload, index, self.env.now))

    def user(self):
        """A closed-loop user: send, wait for the whole reply, think, send again."""
        think_s = self.workload.think_time_s
        while self.next_index < len(self.workload):
            index = self.next_index
            self.next_index += 1
            done = self.done_events[index] = self.env.event()
            self.route(make_request(self.workload, index, self.env.now))
            yield done
            if think_s > 0:
                heapq.heappush(self.thinking_until, self.env.now + think_s)
                yield self.env.timeout(think_s)
                heapq.heappop(self.thinking_until)

    def run(self) -> SimResult:
        if self.workload.arrival_s is not None:
            self.env.process(self.arrivals())
        else:
            for _ in range(self.workload.concurrency or 1):
                self.env.process(self.user())
        self.env.run()
        return SimResult(self.scenario, self.memory, self.workload, self.recorder, self.cost)


def simulate(
    scenario: Scenario,
    coefficients: CostCoefficients | None = None,
    record_steps: bool = True,
    progress: Callable[[int, int], None] | None = None,
    fast_forward: bool = True,
    steps_sink: Callable[[dict[str, np.ndarray]], None] | None = None,
) -> SimResult:
    """Run a scenario. fast_forward=False is the reference the fast paths are tested against: every decode
    step its own event, every row through allocate_slots, every full block registered in the prefix cache
    at allocation (for tests). steps_sink takes the step rows in chunks as the run goes (see
    sim.metrics.Recorder)."""
    return Simulation(scenario, coefficients, record_steps, progress, fast_forward, steps_sink).run()
