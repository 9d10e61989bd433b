"""A scheduled step run on the live engine and recorded: the part of gpu_engine/engine.py's step() after
schedule(), shared by the engine, its host KV tier's steps (gpu_engine/host_copies.py) and the prefill/decode pair
(gpu_engine/pd_pair.py), which schedule on their own."""

from __future__ import annotations

from gpu_engine.runner import ModelRunner
from sim.scheduler_base import Scheduler


def execute(scheduler: Scheduler, runner: ModelRunner, clock, on_finished, out, start: float) -> None:
    """The rest of step() once `out` is scheduled (gpu_engine/pd_pair.py schedules itself: a disaggregated
    engine may have nothing to schedule while its requests wait for KV)."""
    blocks_in_use = scheduler.kv.pool.num_used_blocks
    out.start_s = start
    executed = clock()
    sampled = runner.execute(out.scheduled)
    end = clock()
    finished = scheduler.update(out, end, sampled)
    done = clock()
    host_s = (executed - start) + (done - end)
    scheduler.record_step(out, start, done - start, blocks_in_use, host_s, end - executed)
    for request in finished:
        on_finished(request)
