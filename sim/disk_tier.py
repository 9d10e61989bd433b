"""A local disk tier behind the host KV tier, as LMCache's local disk backend keeps one (`local_disk`,
`max_local_disk_size`: docs/source/kv_cache/storage_backends/local_storage.rst, "Local Storage Explanation"):

- what is written: every block the host tier stores, as it is stored (LMCache puts each chunk into every backend it
  has: the CPU tier holds a subset of the disk's), a write that delays nothing (its put() is asynchronous);
- which blocks it keeps: one file per block, the least recently used deleted when it is full (LMCache's default
  policy, LRU);
- lookup: after the GPU and the host tier (LMCache checks CPU RAM before the disk), the leading run of the blocks
  past the host tier's hits that the disk holds, touched as they are found;
- a load reads its disk blocks at `disk_read_gb_s` and moves them over the host link: each block at the slower of
  the two rates (sim/host_link.py).

The bookkeeping is the host tier's LRU (sim/host_tier.HostTier), one more of them; this module says what the disk
adds to the summary.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sim.config import KvOffloadConfig
    from sim.host_tier import HostTier


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


def disk_tiers_summary(disks: list[HostTier]) -> dict:
    """summary.json's `kv_offload.disk`: the tier per GPU, bytes per GPU written and read summed over the replicas,
    and the seconds the writes take at the disk's write rate (they delay nothing here: more than the run lasts
    says the disk could not keep up)."""
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
    }
