"""The live engine's host KV tier: the blocks the shared tier keeps (sim/host_tier.py decides which, for both
executors) copied out of the runner's KV cache once the step that computed them is done, and copied back into a
request's blocks when the scheduler loads them, timed (vLLM's offloading worker copies on its own CUDA stream;
this engine, synchronous, copies between steps)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_engine.runner import ModelRunner
from gpu_engine.step_execute import execute
from sim.host_tier import mark_first_scheduled
from sim.request import Request
from sim.scheduler_base import Scheduler


class HostCopies:
    def __init__(self, scheduler: Scheduler, runner: ModelRunner) -> None:
        self.scheduler, self.runner, self.kv = scheduler, runner, scheduler.kv
        self.kv.host.journal = []
        self.blocks: dict = {}  # key -> [(K, V) of the block in each layer], on the host
        self.loads: list[tuple[Request, int]] = []  # started by schedule(), copied after its step
        scheduler.on_host_load = lambda request, num_blocks: self.loads.append((request, num_blocks))

    def step(self, clock: Callable[[], float], on_finished: Callable[[Request], None], start: float) -> None:
        """gpu_engine.engine.step with a host tier: a step may schedule nothing while requests wait for loads."""
        out = self.scheduler.schedule()
        if out.scheduled:
            mark_first_scheduled(out, start)
            execute(self.scheduler, self.runner, clock, on_finished, out, start)
        elif not self.loads:
            raise RuntimeError(f"no request can be scheduled with {self.kv.pool.num_free_blocks} free blocks")
        self._load(clock)
        self._copy_out()

    def _load(self, clock: Callable[[], float]) -> None:
        """Each load's blocks from the host into the request's last blocks (those past its GPU hits), timed; the
        request is then schedulable. Before the step's stores and evictions are applied: a block looked up in
        this schedule and evicted after it is still here (vLLM holds the blocks it loads)."""
        for request, num_blocks in self.loads:
            stop = len(request.block_ids)
            keys = self.kv.block_keys(request, stop - num_blocks, stop)
            start_s = clock()
            dst = torch.tensor(request.block_ids[stop - num_blocks :], device=self.runner.device)
            for layer, (k, v) in enumerate(self.runner.kv_caches):
                k[dst] = torch.stack([self.blocks[key][layer][0] for key in keys]).to(k.device)
                v[dst] = torch.stack([self.blocks[key][layer][1] for key in keys]).to(v.device)
            if self.runner.device.type == "cuda":
                torch.cuda.synchronize(self.runner.device)
            request.host_load_s += clock() - start_s
            self.scheduler.add_request(request)
        self.loads.clear()

    def _copy_out(self) -> None:
        """The tier's stores (blocks this step computed) and evictions, in the order the tier made them."""
        journal = self.kv.host.journal
        for op, key, block_id in journal:
            if op == "evict":
                del self.blocks[key]
                continue
            self.blocks[key] = [
                (k[block_id].to("cpu", copy=True), v[block_id].to("cpu", copy=True)) for k, v in self.runner.kv_caches
            ]
        journal.clear()
