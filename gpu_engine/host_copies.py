"""The live engine's host KV tier, and the disk tier behind it: the blocks the shared tiers keep (sim/host_tier.py and
sim/disk_tier.py decide which, for both executors) copied out of the runner's KV cache once the step that computed
them is done, and copied back into a request's blocks when the scheduler loads them, timed (vLLM's offloading
worker copies on its own CUDA stream; this engine, synchronous, copies between steps).

The disk tier is a folder of one file per block, as LMCache's local disk backend keeps it: a block is copied to
host memory between steps and written to its file by a writer thread, so that, as LMCache's asynchronous put(), the
write delays no step; a load that needs a block still being written waits for its write. The folder is the
system's temporary one, removed when the run ends."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch

from gpu_engine.runner import ModelRunner
from gpu_engine.step_execute import execute
from sim.host_tier import mark_first_scheduled
from sim.request import Request
from sim.scheduler_base import Scheduler

Block = list[tuple[torch.Tensor, torch.Tensor]]  # (K, V) of one block in each layer, on the host


class DiskBlocks:
    """The disk tier's blocks: one file each in a temporary folder, written and deleted by one writer thread (in
    the order the tier stored and evicted them)."""

    def __init__(self) -> None:
        self.folder = tempfile.TemporaryDirectory(prefix="planner-kv-disk-")
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kv-disk-writer")
        self.files: dict[Hashable, tuple[Path, Future]] = {}  # key -> its file, and its write
        self.num_files = 0

    def write(self, key: Hashable, block: Block) -> None:
        self.num_files += 1
        path = Path(self.folder.name) / f"{self.num_files}.pt"
        self.files[key] = (path, self.writer.submit(torch.save, block, path))

    def delete(self, key: Hashable) -> None:
        path, _ = self.files.pop(key)
        self.writer.submit(path.unlink)  # after its write: one writer, in order

    def read(self, key: Hashable) -> Block:
        path, written = self.files[key]
        written.result()  # a block still being written is waited for
        return torch.load(path)

    def close(self) -> None:
        self.writer.shutdown(wait=True)
        self.folder.cleanup()


class HostCopies:
    def __init__(self, scheduler: Scheduler, runner: ModelRunner) -> None:
        self.scheduler, self.runner, self.kv = scheduler, runner, scheduler.kv
        self.kv.host.journal = []
        self.blocks: dict[Hashable, Block] = {}  # the host tier's
        self.disk = None if self.kv.host.disk is None else DiskBlocks()
        if self.disk is not None:
            self.kv.host.disk.journal = []
        self.loads: list[tuple[Request, int]] = []  # started by schedule(), copied after its step
        scheduler.on_host_load = lambda request, num_blocks: self.loads.append((request, num_blocks))

    def step(self, clock: Callable[[], float], on_finished: Callable[[Request], None], start: float) -> None:
        """gpu_engine.engine.step with a host tier: a step may schedule nothing while requests wait for loads."""
        if self.kv.host.disk is not None:  # the disk finds the blocks whose modelled writes have ended by now
            self.kv.host.disk.advance(clock())
        out = self.scheduler.schedule()
        if out.scheduled:
            mark_first_scheduled(out, start)
            execute(self.scheduler, self.runner, clock, on_finished, out, start)
        elif not self.loads:
            raise RuntimeError(f"no request can be scheduled with {self.kv.pool.num_free_blocks} free blocks")
        self._load(clock)
        self._copy_out()

    def close(self) -> None:
        """The disk tier's files written and removed (the run is over)."""
        if self.disk is not None:
            self.disk.close()

    def _block(self, key: Hashable) -> Block:
        """A block the tiers hold: the host's, else the disk's (the scheduler looked it up in that order)."""
        block = self.blocks.get(key)
        return block if block is not None else self.disk.read(key)

    def _load(self, clock: Callable[[], float]) -> None:
        """Each load's blocks from the host (or the disk) into the request's last blocks (those past its GPU hits),
        timed; the request is then schedulable. Before the step's stores and evictions are applied: a block looked
        up in this schedule and evicted after it is still here (vLLM holds the blocks it loads)."""
        for request, num_blocks in self.loads:
            stop = len(request.block_ids)
            keys = self.kv.block_keys(request, stop - num_blocks, stop)
            start_s = clock()
            blocks = [self._block(key) for key in keys]
            dst = torch.tensor(request.block_ids[stop - num_blocks :], device=self.runner.device)
            for layer, (k, v) in enumerate(self.runner.kv_caches):
                k[dst] = torch.stack([block[layer][0] for block in blocks]).to(k.device)
                v[dst] = torch.stack([block[layer][1] for block in blocks]).to(v.device)
            if self.runner.device.type == "cuda":
                torch.cuda.synchronize(self.runner.device)
            request.host_load_s += clock() - start_s
            self.scheduler.add_request(request)
        self.loads.clear()

    def _copy_out(self) -> None:
        """The tiers' stores (blocks this step computed) and evictions, in the order each tier made them; the disk's
        first, as the host tier passes its stores on before making its own (sim/host_tier.HostTier.store)."""
        if self.disk is not None:
            journal = self.kv.host.disk.journal
            for op, key, block_id in journal:
                if op == "evict":
                    self.disk.delete(key)
                else:
                    self.disk.write(key, self._copy(block_id))
            journal.clear()
        journal = self.kv.host.journal
        for op, key, block_id in journal:
            if op == "evict":
                del self.blocks[key]
            else:
                self.blocks[key] = self._copy(block_id)
        journal.clear()

    def _copy(self, block_id: int) -> Block:
        return [(k[block_id].to("cpu", copy=True), v[block_id].to("cpu", copy=True)) for k, v in self.runner.kv_caches]
