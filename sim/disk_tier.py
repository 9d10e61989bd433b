"""A local disk tier behind the host KV tier, as LMCache's local disk backend keeps one (`local_disk`,
`max_local_disk_size`: docs/source/kv_cache/storage_backends/local_storage.rst, "Local Storage Explanation"):

- what is written: every block the host tier stores, as it is stored (LMCache puts each chunk into every backend it
  has: the CPU tier holds a subset of the disk's), a write that delays no step (its put() is asynchronous: a
  writer works through a queue); the writes queue at `disk_write_gb_s` one after another, and a block is found on
  the disk only once its write has ended (LMCache's backend registers a key when its file is written), so a disk
  slower than the blocks come finds less;
- which blocks it keeps: one file per block, the least recently used deleted when it is full (LMCache's default
  policy, LRU);
- lookup: after the GPU and the host tier (LMCache checks CPU RAM before the disk), the leading run of the blocks
  past the host tier's hits that the disk holds, touched as they are found;
- a load reads its disk blocks at `disk_read_gb_s` and moves them over the host link: each block at the slower of
  the two rates (sim/host_link.py).

The bookkeeping is the host tier's LRU (sim/host_tier.HostTier) with the write queue added (`DiskTier`); the
executors set its clock before each schedule (`advance`). Where it simplifies: blocks stored inside a simulated
decode window (sim/replica.py fast-forwards several steps at once) start their writes at the window's start.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

from sim.host_tier import HostTier

if TYPE_CHECKING:
    from sim.config import KvOffloadConfig


class DiskTier(HostTier):
    """The disk's LRU of blocks and its write queue: a block stored at `now_s` is written after those queued before
    it, each taking block_bytes at `disk_write_gb_s`, and found by lookups once written."""

    def __init__(self, num_blocks: int, block_bytes: int, config: KvOffloadConfig) -> None:
        super().__init__(num_blocks, block_bytes, config)
        self.write_s = block_bytes / (config.disk_write_gb_s * 1e9)  # one block's write
        self.now_s = 0.0  # the executor's clock, as of the last advance()
        self.writes_end_s = 0.0  # when the queued writes are all done
        self.max_backlog_s = 0.0  # the longest a store waited behind the queue, write included
        self.num_unwritten = 0  # lookups stopped at a block still being written
        self._writing: deque[tuple[float, Hashable]] = deque()  # (write ends, key), in the order queued
        self._ends: dict[Hashable, float] = {}  # key -> its last write's end, while not ended by now_s

    def advance(self, now_s: float) -> None:
        """The executor's clock: the writes ended by now_s make their blocks findable."""
        self.now_s = now_s
        writing, ends = self._writing, self._ends
        while writing and writing[0][0] <= now_s:
            end_s, key = writing.popleft()
            if ends.get(key) == end_s:  # not queued again since
                del ends[key]

    def store(self, keys: Sequence[Hashable], block_ids: Sequence[int]) -> None:
        lru = self._lru
        new = [key for key in keys if key not in lru]
        super().store(keys, block_ids)
        for key in new:
            self.writes_end_s = max(self.writes_end_s, self.now_s) + self.write_s
            self._writing.append((self.writes_end_s, key))
            self._ends[key] = self.writes_end_s
        if new:
            self.max_backlog_s = max(self.max_backlog_s, self.writes_end_s - self.now_s)

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """The leading run of keys the disk holds written (each touched)."""
        lru, ends, found = self._lru, self._ends, 0
        for key in keys:
            if key not in lru:
                break
            if key in ends:
                self.num_unwritten += 1
                break
            lru.move_to_end(key)
            found += 1
        return found


def disk_blocks(offload: KvOffloadConfig, block_bytes: int) -> int:
    """The blocks the disk tier holds per GPU (0: no disk tier)."""
    return 0 if offload.disk_gib is None else int(offload.disk_gib * 2**30) // block_bytes


def disk_load_s(num_host: int, num_disk: int, block_bytes: int, offload: KvOffloadConfig) -> float:
    """Seconds alone on the link for a load of num_host blocks from host memory and num_disk from the disk, each of
    the latter at the slower of the disk's read rate and the host link."""
    host_bytes_per_s = offload.host_link_gb_s * 1e9
    if not num_disk:
        return (num_host + num_disk) * block_bytes / host_bytes_per_s
    disk_bytes_per_s = min(offload.disk_read_gb_s * 1e9, host_bytes_per_s)
    return num_host * block_bytes / host_bytes_per_s + num_disk * block_bytes / disk_bytes_per_s


def disk_tiers_summary(disks: list[DiskTier]) -> dict:
    """summary.json's `kv_offload.disk`: the tier per GPU, bytes per GPU written and read summed over the replicas,
    the seconds the writes take at the disk's write rate, the longest a write waited in the queue (replicas' worst)
    and the lookups that stopped at a block not written yet."""
    config, block_bytes = disks[0].config, disks[0].block_bytes
    written = sum(d.num_stored for d in disks) * block_bytes
    return {
        "disk_gib": config.disk_gib,
        "disk_read_gb_s": config.disk_read_gb_s,
        "disk_write_gb_s": config.disk_write_gb_s,
        "num_blocks": disks[0].num_blocks,
        "written_bytes": written,
        "read_bytes": sum(d.num_loaded for d in disks) * block_bytes,
        "evicted_blocks": sum(d.num_evicted for d in disks),
        "num_loads": sum(d.num_loads for d in disks),
        "write_s": written / len(disks) / (config.disk_write_gb_s * 1e9),
        "max_write_backlog_s": max(d.max_backlog_s for d in disks),
        "num_unwritten_lookups": sum(d.num_unwritten for d in disks),
    }
