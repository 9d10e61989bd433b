"""A data-parallel group's scheduling decisions, shared by the simulator (sim/data_parallel.py) and the live engine
(gpu_engine/data_parallel.py): which rank a request goes to, and which ranks step in a lockstep step.

- vLLM's front end (`DPLBAsyncMPClient.get_core_engine_for_request`, vllm/v1/engine/core_client.py) sends each
  request to the rank with the lowest score 4 x waiting + running, ties to the first rank (one API server: its
  start index 0). It reads counts the DP coordinator publishes every 100 ms and adds its own sends meanwhile; here
  the counts are read when the request comes (simplified: no staleness).
- A mixture of experts' ranks step in lockstep (`DPEngineCoreProc`, vllm/v1/engine/core.py): while any rank has
  work every rank runs a step, one with nothing to run a dummy batch (`execute_dummy_batch`).
"""

from __future__ import annotations

from sim.scheduler_base import Scheduler
from sim.scheduler_output import SchedulerOutput

WAITING_WEIGHT = 4  # vLLM's DP balancer: score = waiting * 4 + running


def balancer_score(scheduler: Scheduler, num_pending: int = 0) -> int:
    """vLLM's DP load-balancing score of a rank (lower is chosen): its waiting requests, those sent and not yet in
    its queue included, count four times its running ones."""
    return WAITING_WEIGHT * (len(scheduler.waiting) + num_pending) + len(scheduler.running)


def pick_rank(scores: list[int]) -> int:
    """The rank the balancer sends the next request to: the lowest score, the first of equals."""
    return scores.index(min(scores))


def lockstep_schedule(schedulers: list[Scheduler]) -> list[SchedulerOutput | None]:
    """One lockstep step's batches: each rank with requests schedules; None for a rank with none (a dummy batch).
    A rank whose batch schedules nothing (its queue's head blocked) runs a dummy batch too. In a fleet every batch
    may be empty while ranks wait on KV pulls (sim/fleet_dp.py): the group then waits for one to end."""
    outs = [s.schedule() if s.num_unfinished else None for s in schedulers]
    scheduled = any(out is not None and out.scheduled for out in outs)
    if not scheduled and not any(s.awaits_kv_transfers for s in schedulers):
        free = [s.kv.pool.num_free_blocks for s in schedulers]
        raise RuntimeError(f"no request can be scheduled on any rank, with {free} free blocks per rank")
    return outs


def is_dummy(out: SchedulerOutput | None) -> bool:
    return out is None or not out.scheduled
