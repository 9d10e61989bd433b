"""The SimPy driver of a fleet: pools of engines behind one router, and a prefill pool's KV pulled by a decode pool.

Each replica is exactly a one-pool scenario's engine (sim/replica.py: scheduler, KV manager, cost model of its own
pool's GPU and settings). What a fleet adds is around them:

- mixed pools: the router (sim/fleet_router.py) spreads whole requests over every pool's replicas;
- a prefill pool and a decode pool, following vLLM's disaggregated serving (the proxy of
  examples/online_serving/disaggregated_serving, the scheduler's KV connector hooks in vllm/v1/core/sched/
  scheduler.py, NixlConnector in vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py):
  1. the proxy sends the request to a prefill replica with max_tokens 1 and `do_remote_decode`; it computes the
     prompt, samples one token (which the proxy drops) and finishes, its blocks held (`delay_free_blocks`, here
     `Scheduler.sending`);
  2. the proxy sends the whole request to a decode replica with `do_remote_prefill`; its scheduler allocates
     blocks for the prompt, takes local prefix hits, and puts the request in WAITING_FOR_REMOTE_KVS while the
     prompt's other blocks are pulled (`get_num_new_matched_tokens`, `update_state_after_alloc`);
  3. the pull: the link's fixed latency, then the bytes (sim/kv_transfer.py) at the link's bandwidth, shared with
     the other pulls in flight at either end; once done the prefill replica frees the blocks (`finished_sending`)
     and the decode replica's request is schedulable with its prompt computed but for the last token
     (`_update_waiting_for_remote_kv`), which its first step recomputes to sample the first token the client sees.
  TTFT is therefore prefill queue + prefill + pull + the decode replica's queue and first step; TPOT the decode
  pool's.
- layer-wise transfer (LMCache, Mooncake, P2pNccl save each layer's KV as the forward computes it): the pull
  overlaps the prefill's last step, so what is left after it is the larger of the pull less that step and one
  layer's share of the pull.

- data-parallel pools (a pool's hardware.data_parallel_size > 1): a replica is a whole group, the router picks the
  group and the group's DP balancer its rank (sim/fleet_dp.py); a pull goes from the prefill rank to the decode rank
  over their own links.

Simplified: the decode replica is picked when the prefill is done (the proxy picks both at once; the choice only
changes when load is read); the pull starts when the decode scheduler has blocks for it, not at a later step's
`start_load_kv`; no pull fails or times out. Decode windows (sim/replica.py's fast path) are off in a prefill/decode
fleet: a pull ending is an arrival no window can see coming, so every step is stepped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.config import PoolConfig, Scenario
from sim.cost_coefficients import CostCoefficients
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts
from sim.fleet_dp import DataParallelReplica, Rank, build_group, engine_for, wake_rank
from sim.fleet_router import FleetRouter
from sim.kv_groups import kv_pool_blocks
from sim.kv_transfer import LINK_LATENCY_MS, TransferLog, kv_transfer_bytes, link_bytes_per_s
from sim.link_clock import LinkClock
from sim.memory import MemoryBreakdown, memory_breakdown
from sim.metrics import Recorder
from sim.replica import Replica
from sim.request import Request
from sim.scheduler import build_scheduler
from sim.simulation import Simulation
from sim.workload import Workload, generate_workload


class PoolRecorder(Recorder):
    """A pool's recorder: its steps and its own requests; the requests a client sees (a mixed or decode pool's)
    also go to the fleet's `client` recorder. Remembers its last step's duration (a layer-wise pull overlaps it)."""

    def __init__(self, num_gpu_blocks: int, block_size: int, record_steps: bool, client: Recorder | None) -> None:
        super().__init__(num_gpu_blocks, block_size, record_steps)
        self.client = client
        self.last_step_s = 0.0

    def step(self, **row) -> None:
        self.last_step_s = row["duration_s"]
        super().step(**row)

    def finished(self, request: Request) -> None:
        super().finished(request)
        if self.client is not None:
            self.client.finished(request)

    def token_gaps(self, gaps_s, times=1) -> None:
        super().token_gaps(gaps_s, times)
        if self.client is not None:
            self.client.token_gaps(gaps_s, times)

    def token_gaps_since(self, now_s: float, since_s: list[float], counts: list[int]) -> None:
        super().token_gaps_since(now_s, since_s, counts)
        if self.client is not None:
            self.client.token_gaps_since(now_s, since_s, counts)


@dataclass
class PoolRun:
    """One pool in a run: its engine's facts, memory, cost model, recorder and replicas (a data-parallel pool's:
    its groups)."""

    config: PoolConfig
    scenario: Scenario  # the pool as a one-pool scenario
    facts: EngineFacts
    memory: MemoryBreakdown
    cost: CostModel
    num_blocks: int
    recorder: PoolRecorder
    replicas: list[Replica | DataParallelReplica] = field(default_factory=list)
    first_replica: int = 0  # the fleet-wide index of its first engine (steps.csv's replica column: a rank each)


@dataclass
class FleetResult:
    """A finished fleet run: every pool's, the client's view (`recorder`: the requests as the proxy returns them)
    and the KV pulls."""

    scenario: Scenario
    workload: Workload
    pools: list[PoolRun]
    recorder: Recorder
    transfers: TransferLog | None
    transfer_latency_ms: float | None


@dataclass
class _Pull:
    """A pull in flight: the prefill engine holding the blocks, its finished copy, the decode side's request (the
    engines: replicas, or a data-parallel group's ranks)."""

    source: Rank
    prefilled: Request
    request: Request
    destination: Rank | None = None
    overlap_s: float = 0.0  # layer-wise: the prefill's last step, during which the KV streamed out
    start_s: float = 0.0
    num_tokens: int = 0
    num_bytes: int = 0


class FleetSimulation(Simulation):
    """A fleet scenario's run. `coefficients`: each pool's cost model, by pool name (None: spec-sheet).

    The arrivals, the closed loop's users and a reply's end are the one-pool driver's (`Simulation.arrivals`,
    `user`, `next_arrival_s`, `on_finished`: they read env, workload, next_index, thinking_until, done_events and
    progress, and send each request to `self.route`); its __init__ (one pool's replicas) is not run."""

    def __init__(
        self,
        scenario: Scenario,
        coefficients: dict[str, CostCoefficients] | None = None,
        record_steps: bool = True,
        progress: Callable[[int, int], None] | None = None,
        fast_forward: bool = True,
    ) -> None:
        fleet = scenario.fleet
        assert fleet is not None, "a fleet scenario"
        self.scenario, self.fleet, self.progress = scenario, fleet, progress
        self.env = simpy.Environment()
        self.workload = generate_workload(scenario.workload, scenario.max_model_len, scenario.model.vocab_size)
        self.client = Recorder(1, scenario.engine.block_size, record_steps=False)  # requests only: no steps
        closed_loop = self.workload.closed_loop
        num_replicas = sum(p.hardware.replicas for p in fleet.pools)
        # Windows need every arrival known ahead: not so for a pull's end, nor (closed loop) for a reply's.
        windows = fast_forward and not fleet.disaggregated and not (closed_loop and num_replicas > 1)
        self.pools: list[PoolRun] = []
        for pool in fleet.pools:
            pool_scenario = scenario.pool_scenario(pool)
            facts = EngineFacts.of(pool_scenario)
            memory = memory_breakdown(facts)
            num_blocks = kv_pool_blocks(facts, memory)
            client = None if pool.role == "prefill" else self.client
            recorder = PoolRecorder(num_blocks, pool.engine.block_size, record_steps, client)
            cost = CostModel(facts, (coefficients or {}).get(pool.name))
            run = PoolRun(pool, pool_scenario, facts, memory, cost, num_blocks, recorder)
            run.first_replica = sum(
                p.hardware.replicas * p.hardware.data_parallel_size for p in fleet.pools[: len(self.pools)]
            )
            on_finished = self._prefilled if pool.role == "prefill" else self.on_finished
            if pool.hardware.data_parallel_size > 1:
                self._build_groups(run, on_finished, fast_forward)
            else:
                self._build_replicas(run, on_finished, fast_forward, windows, not closed_loop)
            self.pools.append(run)
        entry = {p.config.name: p.replicas for p in self.pools if p.config.role != "decode"}
        decode = [r for p in self.pools if p.config.role == "decode" for r in p.replicas]
        self.router = FleetRouter(fleet.router, entry, decode)
        self.pulls: dict[int, _Pull] = {}
        self.transfers: TransferLog | None = None
        if fleet.disaggregated:
            self._setup_link()
        self.num_finished = 0
        self.next_index = 0
        self.thinking_until: list[float] = []
        self.done_events: dict[int, simpy.Event] = {}

    def _build_replicas(self, run: PoolRun, on_finished, fast_forward: bool, windows: bool, through: bool) -> None:
        """A pool's replicas: one engine each; a decode pool's start their own pulls."""
        for index in range(run.config.hardware.replicas):
            scheduler = build_scheduler(
                run.facts,
                run.num_blocks,
                run.recorder,
                run.first_replica + index,
                fast_forward,
                count_blocks_lazily=True,
            )
            replica = Replica(
                self.env, scheduler, run.cost, run.recorder, self.next_arrival_s, on_finished, windows, through
            )
            if run.config.role == "decode":
                scheduler.on_remote_load = lambda request, n, replica=replica: self._pull(replica, request, n)
            run.replicas.append(replica)

    def _build_groups(self, run: PoolRun, on_finished, fast_forward: bool) -> None:
        """A data-parallel pool's replicas: whole groups; a decode pool's ranks each start their own pulls."""
        ranks = run.config.hardware.data_parallel_size
        for index in range(run.config.hardware.replicas):
            group = build_group(
                self.env, run.facts, run.num_blocks, run.cost, run.recorder, run.first_replica + index * ranks,
                self.next_arrival_s, on_finished, fast_forward,
            )  # fmt: skip
            if run.config.role == "decode":
                for rank in group.ranks:
                    rank.scheduler.on_remote_load = lambda request, n, rank=rank: self._pull(rank, request, n)
            run.replicas.append(group)

    def _setup_link(self) -> None:
        link = self.fleet.kv_transfer
        prefill, decode = (next(p for p in self.pools if p.config.role == role) for role in ("prefill", "decode"))
        self.decode_facts = decode.facts
        self.link_bytes_per_s = link_bytes_per_s(link, prefill.facts, decode.facts)
        self.latency_s = self.transfer_latency_ms() / 1e3
        self.layerwise_floor = 1 / decode.facts.model.num_hidden_layers if link.layerwise else None
        self.prefill_recorder = prefill.recorder
        self.links = LinkClock(self.env, lambda request_id: self._pulled(self.pulls.pop(request_id)))
        self.transfers = TransferLog()

    def transfer_latency_ms(self) -> float | None:
        """The fixed cost of a pull: the file's latency_ms, else its link kind's."""
        link = self.fleet.kv_transfer
        if link is None:
            return None
        if link.latency_ms is not None:
            return link.latency_ms
        return LINK_LATENCY_MS[link.link]

    # --- routing and the disaggregated flow ---

    def route(self, request: Request) -> None:
        if not self.fleet.disaggregated:
            self.router.route(request).submit(request)
            return
        prefilled = Request(  # the proxy's prefill request: max_tokens 1, its KV kept for the decode side
            request.request_id,
            request.arrival_s,
            request.num_prompt_tokens,
            1,
            request.prompt_token_ids,
            request.prefix_group,
            request.prefix_tokens,
            request.trace_block_ids,
            request.trace_block_tokens,
            do_remote_decode=True,
        )
        engine = engine_for(self.router.route(prefilled))
        self.pulls[request.request_id] = _Pull(engine, prefilled, request)
        engine.submit(prefilled)

    def _prefilled(self, prefilled: Request) -> None:
        """A prefill replica sampled the prompt's first token: the proxy sends the request on to a decode replica."""
        pull = self.pulls[prefilled.request_id]
        pull.request.do_remote_prefill = True
        pull.destination = engine_for(self.router.route_decode(pull.request))
        if self.layerwise_floor is not None:  # the KV streamed out during the step that just ended
            pull.overlap_s, pull.start_s = self.prefill_recorder.last_step_s, self.env.now
        pull.destination.submit(pull.request)

    def _pull(self, destination: Replica, request: Request, num_tokens: int) -> None:
        """The decode scheduler has blocks for the prompt: its tokens past the local hits are pulled."""
        pull = self.pulls[request.request_id]
        if pull.start_s != self.env.now:  # the decode side had no blocks at once: the overlap is lost
            pull.overlap_s = 0.0
        pull.start_s = self.env.now
        pull.num_tokens, pull.num_bytes = num_tokens, kv_transfer_bytes(self.decode_facts, num_tokens)
        self.env.process(self._start_pull(pull))

    def _start_pull(self, pull: _Pull):
        yield self.env.timeout(self.latency_s)
        solo_s = pull.num_bytes / self.link_bytes_per_s
        if self.layerwise_floor is not None:
            solo_s = max(solo_s - pull.overlap_s, solo_s * self.layerwise_floor)
        self.links.add(pull.request.request_id, solo_s, pull.source, pull.destination)

    def _pulled(self, pull: _Pull) -> None:
        self.transfers.add(pull.start_s, self.env.now, pull.num_tokens, pull.num_bytes)
        source = pull.source.scheduler
        if pull.prefilled.request_id in source.sending:
            source.finish_sending(pull.prefilled)
            wake_rank(pull.source)  # its queue's head may have waited for these blocks
        else:  # still held by async scheduling's plan: freed when released, as any finished request
            pull.prefilled.do_remote_decode = False
        pull.destination.submit(pull.request)  # WAITING_FOR_REMOTE_KVS: its KV is there

    def run(self) -> FleetResult:
        self.start_load()
        self.env.run()
        latency_ms = self.transfer_latency_ms()
        return FleetResult(self.scenario, self.workload, self.pools, self.client, self.transfers, latency_ms)


def simulate_fleet(
    scenario: Scenario,
    coefficients: dict[str, CostCoefficients] | None = None,
    record_steps: bool = True,
    progress: Callable[[int, int], None] | None = None,
    fast_forward: bool = True,
) -> FleetResult:
    """Run a fleet scenario (`scenario.fleet`); fast_forward=False: every step stepped (the tests' reference)."""
    return FleetSimulation(scenario, coefficients, record_steps, progress, fast_forward).run()


def fleet_step_rows(result: FleetResult) -> dict[str, np.ndarray]:
    """Every pool's step rows in start order, with a `pool` column: the pool's index in the file's order (the order
    of summary.json's fleet.pools); `replica` counts the fleet's replicas across its pools."""
    parts = [(index, p.recorder.step_rows()) for index, p in enumerate(result.pools)]
    names = list(parts[0][1])
    rows = {name: np.concatenate([part[name] for _, part in parts]) for name in names}
    rows["pool"] = np.concatenate([np.full(len(part["start_s"]), pool, np.int32) for pool, part in parts])
    order = np.argsort(rows["start_s"], kind="stable")
    return {name: column[order] for name, column in rows.items()}
