"""The SimPy simulation of one pool: arrivals, closed-loop users, a router and one engine process per replica
(sim/replica.py: how an engine steps, and its decode windows). Data-parallel groups (sim/data_parallel.py) and
fleets (sim/fleet.py) build on it; sim/driver.py's `simulate` picks which runs a scenario.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from sim.config import Scenario
from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.draft_cost import DraftCost
from sim.engine_facts import EngineFacts
from sim.kv_groups import kv_pool_blocks
from sim.memory import MemoryBreakdown, memory_breakdown
from sim.metrics import Recorder
from sim.prefix_stats import PrefixCacheCounts
from sim.replica import Replica
from sim.request import Request
from sim.scheduler import build_scheduler
from sim.workload import Workload, generate_workload, make_request


@dataclass
class SimResult:
    """A finished simulation: what ran (scenario, memory, workload, cost model) and what it recorded."""

    scenario: Scenario
    memory: MemoryBreakdown
    workload: Workload
    recorder: Recorder
    cost_model: CostModel
    # A data-parallel deployment's ranks and MoE layers (sim/data_parallel.py); None otherwise
    data_parallel: dict | None = None


class Simulation:
    """Wires arrivals (open loop) or users (closed loop) to replicas through a router. `facts`: the scenario's
    engine's (`EngineFacts.of(scenario)`), when the caller has derived them already; the memory model, the cost
    model and every replica's KV manager read these."""

    def __init__(
        self,
        scenario: Scenario,
        coefficients: CostCoefficients | None = None,
        record_steps: bool = True,
        progress: Callable[[int, int], None] | None = None,
        fast_forward: bool = True,
        steps_sink: Callable[[dict[str, np.ndarray]], None] | None = None,
        facts: EngineFacts | None = None,
    ) -> None:
        self.scenario = scenario
        facts = EngineFacts.of(scenario) if facts is None else facts
        self.memory = memory_breakdown(facts)
        self.workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
        self.cost = CostModel(facts, coefficients)
        self.drafting = DraftCost.of(facts, coefficients)  # speculative decoding's drafter; None without
        num_blocks = kv_pool_blocks(facts, self.memory)  # sliding-window groups: vLLM's pool of layer slots
        self.recorder = Recorder(num_blocks, scenario.engine.block_size, record_steps, steps_sink)
        offload = scenario.engine.kv_offload
        if self.workload.block_ids is not None or offload is not None:  # what did the cache (and the tier) hit?
            self.recorder.prefix = PrefixCacheCounts.of(offload)
        self.progress = progress
        self.env = simpy.Environment()
        self.num_finished = 0
        self.next_index = 0  # of the workload: the next request to issue
        self.thinking_until: list[float] = []  # closed loop: heap of users' next request times
        self.done_events: dict[int, simpy.Event] = {}
        self.round_robin = itertools.count()
        # A closed loop over several replicas: a reply finishing on one replica sends a request to another,
        # which may be in the middle of a decode window; windows are not interrupted, so step there.
        closed_loop = self.workload.closed_loop
        fast_paths = fast_forward  # False: the reference, every fast path off (the tests compare with it)
        fast_forward = fast_forward and not (closed_loop and self.num_engines > 1)
        self.replicas = self.build_replicas(facts, num_blocks, fast_paths, fast_forward, closed_loop)

    @property
    def num_engines(self) -> int:
        return self.scenario.hardware.replicas

    def build_replicas(self, facts: EngineFacts, num_blocks: int, fast_paths: bool, fast_forward: bool, closed_loop):
        """One engine process per replica, each with its scheduler and KV pool."""
        return [
            Replica(
                self.env,
                build_scheduler(
                    facts, num_blocks, self.recorder, index, fast_paths, fast_paths, self.scenario.workload.seed
                ),
                self.cost,
                self.recorder,
                self.next_arrival_s,
                self.on_finished,
                fast_forward,
                through_finishes=not closed_loop,
                drafting=self.drafting,
            )
            for index in range(self.num_engines)
        ]

    def next_arrival_s(self) -> float:
        wl = self.workload
        if not wl.closed_loop:
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

    def user(self, user: int):
        """A closed-loop user: wait for its start, then send, wait for the whole reply, think, send again."""
        yield from self._think(self.workload.user_start_s(user))
        while self.next_index < len(self.workload):
            index = self.next_index
            self.next_index += 1
            yield from self._send_and_wait(index)
            yield from self._think(self.workload.think_time_s)

    def session(self, first: int, next_turns: np.ndarray):
        """A session whose turns wait for replies: its first turn at its arrival, each later one its think time
        after the previous turn's reply, as a closed-loop user's next request."""
        wl, index = self.workload, first
        yield from self._think(float(wl.arrival_s[first]) - self.env.now)
        while True:
            yield from self._send_and_wait(index)
            index = int(next_turns[index])
            if index < 0:
                return
            yield from self._think(float(wl.think_s[index]))

    def _send_and_wait(self, index: int):
        done = self.done_events[index] = self.env.event()
        self.route(make_request(self.workload, index, self.env.now))
        yield done

    def _think(self, seconds: float):
        if seconds > 0:  # a due request, as a thinking user's: decode windows stop short of it
            heapq.heappush(self.thinking_until, self.env.now + seconds)
            yield self.env.timeout(seconds)
            heapq.heappop(self.thinking_until)

    def start_load(self) -> None:
        """The workload's arrivals, or its closed loop's users, as SimPy processes on this simulation's clock."""
        wl = self.workload
        if wl.follows is not None:
            next_turns = wl.next_turns()
            for first in np.flatnonzero(wl.follows < 0).tolist():
                self.env.process(self.session(first, next_turns))
        elif wl.arrival_s is not None:
            self.env.process(self.arrivals())
        else:
            for user in range(self.workload.concurrency or 1):
                self.env.process(self.user(user))

    def run(self) -> SimResult:
        self.start_load()
        self.env.run()
        return SimResult(self.scenario, self.memory, self.workload, self.recorder, self.cost, self.stats())

    def stats(self) -> dict | None:
        """What a kind of simulation adds to its result (sim/data_parallel.py's); None here."""
        return None
