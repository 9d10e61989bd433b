"""A KV tier in host memory under the GPU's prefix cache, as vLLM's native offloading connector keeps it
(`--kv-offloading-backend native`: OffloadingConnector, vllm/distributed/kv_transfer/kv_connector/v1/offloading/
scheduler.py, over vllm/v1/kv_offload/'s CPU manager). Integer bookkeeping only, shared by both executors:

- what is stored: every full block as it is computed (`_get_reqs_to_store`: each step's new full blocks of every
  scheduled request, skipping those the tier holds already), not only what the GPU evicts; here at the moment the
  GPU's prefix cache registers the block (sim/kv_manager.py), the same blocks in the same order;
- which blocks it keeps: the least recently stored or looked-up go first when it is full (the CPU manager's LRU);
- lookup: after the GPU prefix cache (`get_num_new_matched_tokens` is asked for the tokens past the GPU's hits),
  the leading run of the following blocks the tier holds, touched as they are found;
- a hit is loaded, not recomputed: the request waits while its blocks cross the host link (vLLM loads them
  asynchronously before the request is scheduled: `load_kv_async`, WAITING_FOR_REMOTE_KVS), the executor prices
  the copy.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.config import KvOffloadConfig
    from sim.disk_tier import DiskTier
    from sim.memory import MemoryBreakdown
    from sim.prefix_stats import PrefixCacheCounts
    from sim.scheduler_output import SchedulerOutput


class HostTier:
    """An LRU of block keys (the GPU prefix cache's chained keys) of at most num_blocks blocks."""

    def __init__(self, num_blocks: int, block_bytes: int, config: KvOffloadConfig) -> None:
        self.config = config
        self.num_blocks = num_blocks
        self.block_bytes = block_bytes  # per GPU: what one block moves over one GPU's host link
        self._lru: OrderedDict[Hashable, None] = OrderedDict()  # least recently used first
        self.num_stored = 0  # blocks copied GPU -> host
        self.num_loaded = 0  # blocks copied host -> GPU
        self.num_evicted = 0
        self.num_loads = 0  # loads started (a request's blocks past its GPU hits, at once)
        # The live engine's copies (gpu_engine/host_copies.py): ("store", key, GPU block id) and ("evict", key,
        # None) in the order they happen, for it to copy once the step has computed the blocks; None: not kept
        self.journal: list[tuple[str, Hashable, int | None]] | None = None
        # A disk tier behind this one (sim/disk_tier.py): written with every store, looked up past this tier's
        # hits; the last lookup's blocks found there (counted in its return)
        self.disk: DiskTier | None = None
        self.last_disk_hits = 0

    def store(self, keys: Sequence[Hashable], block_ids: Sequence[int]) -> None:
        """Blocks just computed (keys, and the GPU blocks that hold them): those not held yet are copied in (and
        touched, as the rest)."""
        lru, journal = self._lru, self.journal
        if self.disk is not None:
            self.disk.store(keys, block_ids)
        for key, block_id in zip(keys, block_ids, strict=True):
            if key in lru:
                lru.move_to_end(key)
                continue
            lru[key] = None
            self.num_stored += 1
            if journal is not None:
                journal.append(("store", key, block_id))
        while len(lru) > self.num_blocks:
            key, _ = lru.popitem(last=False)
            self.num_evicted += 1
            if journal is not None:
                journal.append(("evict", key, None))

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """How many of the leading keys the tier holds (each found one touched), and past those the disk tier's."""
        lru, found = self._lru, 0
        for key in keys:
            if key not in lru:
                break
            lru.move_to_end(key)
            found += 1
        if self.disk is not None:
            self.last_disk_hits = self.disk.lookup(keys[found:]) if found < len(keys) else 0
            return found + self.last_disk_hits
        return found


def host_tiers_summary(tiers: list[HostTier], prefix: PrefixCacheCounts | None) -> dict:
    """summary.json's `kv_offload`: the tier per GPU, blocks per replica, bytes per GPU moved each way summed over
    the replicas, and the seconds requests spent waiting for loads (summed over requests); a disk behind the tiers
    adds its own (sim/disk_tier.disk_tiers_summary)."""
    config = tiers[0].config
    return {
        "size_gib": config.size_gib,
        "host_link_gb_s": config.host_link_gb_s,
        "num_blocks": tiers[0].num_blocks,
        "stored_bytes": sum(t.num_stored for t in tiers) * tiers[0].block_bytes,
        "loaded_bytes": sum(t.num_loaded for t in tiers) * tiers[0].block_bytes,
        "evicted_blocks": sum(t.num_evicted for t in tiers),
        "num_loads": sum(t.num_loads for t in tiers),
        "load_s": prefix.load_s if prefix is not None else 0.0,
    }


def host_memory(offload: KvOffloadConfig, mem: MemoryBreakdown, tensor_parallel_size: int) -> dict:
    """The host tier's pinned memory (vLLM allocates it whole at start-up) and what it holds."""
    num_blocks = int(offload.size_gib * 2**30) // mem.block_bytes
    return {
        "pinned_bytes_per_gpu": int(offload.size_gib * 2**30),
        "pinned_bytes_per_engine": int(offload.size_gib * 2**30) * tensor_parallel_size,
        "num_blocks": num_blocks,
        "kv_tokens": num_blocks * mem.block_size,
        "host_memory_gib": offload.host_memory_gib,
    }


def host_memory_line(d: dict) -> str:
    node = f" (of {d['host_memory_gib']:g} GiB it may pin)" if d["host_memory_gib"] is not None else ""
    return (
        f"Host KV tier (pinned host memory): {d['pinned_bytes_per_gpu'] / 2**30:,.2f} GiB per GPU,"
        f" {d['pinned_bytes_per_engine'] / 2**30:,.2f} GiB per engine{node} = {d['num_blocks']:,} blocks,"
        f" {d['kv_tokens']:,} KV tokens"
    )


def mark_first_scheduled(out: SchedulerOutput, now_s: float) -> None:
    """The step's requests scheduled for the first time: now (the TTFT's queueing ends, its compute begins)."""
    for request, _ in out.scheduled:
        if request.first_scheduled_s is None:
            request.first_scheduled_s = now_s
