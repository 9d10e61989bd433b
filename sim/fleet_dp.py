"""A fleet pool whose replicas are data-parallel groups (a pool's `hardware.data_parallel_size` > 1): the router
(sim/fleet_router.py) sends a request to a group, and the group's own DP balancer picks the rank, as vLLM serves a
data-parallel deployment behind one API server: its front end (`DPLBAsyncMPClient.get_core_engine_for_request`,
vllm/v1/engine/core_client.py) sends each request to the rank with the lowest 4 x waiting + running, from the counts
the DP coordinator (vllm/v1/engine/coordinator.py) gathers from the ranks (sim/dp_balancer.py).

A group's ranks are sim/data_parallel.py's: a mixture of experts under expert parallel steps its ranks in lockstep
(`LockstepGroup`), a dense model's ranks are independent engines (`Replica`s, stepped). Each rank holds its own KV,
so a prefill/decode fleet's pull goes from the prefill group's rank that computed the prompt to the decode group's
rank its balancer picked, over that rank's own link (sim/fleet.py keys the shared links by rank).
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.cost_model import CostModel
from sim.data_parallel import LockstepGroup, LockstepRank, rank_score
from sim.dp_balancer import pick_rank
from sim.engine_facts import EngineFacts
from sim.metrics import Recorder
from sim.replica import Replica
from sim.request import Request
from sim.scheduler import build_scheduler

Rank = LockstepRank | Replica


class DataParallelReplica:
    """One data-parallel group of a fleet pool, as the router sees it: its requests outstanding, and a `submit`
    that hands a request to the rank the group's balancer picks."""

    def __init__(self, ranks: list[Rank], group: LockstepGroup | None) -> None:
        self.ranks, self.group = ranks, group
        self.requests_per_rank = [0] * len(ranks)  # requests the balancer sent each rank

    def pick(self) -> Rank:
        """The rank vLLM's DP balancer sends the next request to (counted as sent)."""
        index = pick_rank([rank_score(rank) for rank in self.ranks])
        self.requests_per_rank[index] += 1
        return self.ranks[index]

    def submit(self, request: Request) -> None:
        self.pick().submit(request)

    @property
    def num_outstanding(self) -> int:
        """Requests sent to the group and not finished (what the router reads of it)."""
        return sum(_outstanding(rank) for rank in self.ranks)

    def stats(self) -> dict:
        """A single group's summary figures (sim/data_parallel.py's `DataParallelSimulation.stats`)."""
        group = self.group.stats.to_dict() if self.group is not None else {"lockstep_steps": 0}
        return {"data_parallel_size": len(self.ranks), "requests_per_rank": self.requests_per_rank, **group}


def engine_for(replica: Replica | DataParallelReplica) -> Rank:
    """The engine a request sent to a fleet replica runs on: the replica itself, or its group's picked rank."""
    return replica.pick() if isinstance(replica, DataParallelReplica) else replica


def wake_rank(rank: Rank) -> None:
    """An engine waiting for blocks or pulls plans again: a lockstep rank's whole group steps."""
    if isinstance(rank, LockstepRank):
        rank.group.wake()
    elif rank.idle is not None and not rank.idle.triggered:
        rank.idle.succeed()


def build_group(
    env: simpy.Environment,
    facts: EngineFacts,
    num_blocks: int,
    cost: CostModel,
    recorder: Recorder,
    first_rank: int,
    next_arrival_s: Callable[[], float],
    on_finished: Callable[[Request], None],
    fast_paths: bool,
) -> DataParallelReplica:
    """A group of `facts.hardware.data_parallel_size` ranks; `first_rank`: its first rank's fleet-wide engine index
    (steps.csv's replica column). Dense ranks are stepped, as the balancer reads their queues."""
    schedulers = [
        build_scheduler(facts, num_blocks, recorder, first_rank + index, fast_paths, count_blocks_lazily=True)
        for index in range(facts.hardware.data_parallel_size)
    ]
    if facts.expert_parallel_size > 1:
        group = LockstepGroup(env, schedulers, cost, on_finished)
        return DataParallelReplica(group.ranks, group)
    ranks = [Replica(env, s, cost, recorder, next_arrival_s, on_finished, fast_forward=False) for s in schedulers]
    return DataParallelReplica(ranks, None)


def _outstanding(rank: Rank) -> int:
    return rank.scheduler.num_unfinished if isinstance(rank, LockstepRank) else rank.num_outstanding
