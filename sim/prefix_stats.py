"""What the prefix cache saved: prompt tokens looked up at admission and those found computed (vLLM's
PrefixCacheStats, vllm/v1/metrics/stats.py: `queries` and `hits` in tokens, whose ratio its logger prints as the
prefix cache hit rate; here counted once per request, at its first admission, as vLLM's `num_cached_tokens`)."""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import KvOffloadConfig
from sim.request import Request


@dataclass
class PrefixCacheCounts:
    """Tokens over every replica's first admissions (a preempted request's return is not counted again)."""

    num_requests: int = 0
    queried_tokens: int = 0  # the prompts' tokens at admission
    hit_tokens: int = 0  # of those, found in the GPU prefix cache
    host_hit_tokens: int | None = None  # ... and past those, in the host tier (engine.kv_offload); None: no tier
    disk_hit_tokens: int | None = None  # ... and past those, on its disk tier (kv_offload.disk_gib); None: no disk
    # With a host tier, each finished request's TTFT in three parts, summed (s): waiting to be scheduled (its load
    # aside), waiting for its blocks from the host, and from its first scheduled step to its first token
    num_split: int = 0
    queueing_s: float = 0.0
    load_s: float = 0.0
    compute_s: float = 0.0

    @classmethod
    def of(cls, offload: KvOffloadConfig | None) -> PrefixCacheCounts:
        """Counts for an engine with this host tier (None: without), and its disk tier if it has one."""
        if offload is None:
            return cls()
        return cls(host_hit_tokens=0, disk_hit_tokens=None if offload.disk_gib is None else 0)

    def admitted(self, num_tokens: int, num_hit_tokens: int, num_host_hit_tokens: int = 0, num_disk_hit_tokens=0):
        self.num_requests += 1
        self.queried_tokens += num_tokens
        self.hit_tokens += num_hit_tokens
        if num_host_hit_tokens:
            self.host_hit_tokens += num_host_hit_tokens
        if num_disk_hit_tokens:
            self.disk_hit_tokens += num_disk_hit_tokens

    def finished(self, request: Request) -> None:
        self.num_split += 1
        self.queueing_s += request.first_scheduled_s - request.arrival_s - request.host_load_s
        self.load_s += request.host_load_s
        self.compute_s += request.first_token_s - request.first_scheduled_s

    def to_dict(self) -> dict:
        share = (lambda n: n / self.queried_tokens) if self.queried_tokens else (lambda n: 0.0)
        out = {
            "num_requests": self.num_requests,
            "queried_tokens": self.queried_tokens,
            "hit_tokens": self.hit_tokens,
            "hit_rate": share(self.hit_tokens),
        }
        if self.host_hit_tokens is not None:
            out |= {"host_hit_tokens": self.host_hit_tokens, "host_hit_rate": share(self.host_hit_tokens)}
        if self.disk_hit_tokens is not None:
            out |= {"disk_hit_tokens": self.disk_hit_tokens, "disk_hit_rate": share(self.disk_hit_tokens)}
        if self.num_split:
            out["mean_ttft_split_ms"] = {
                "queueing": self.queueing_s / self.num_split * 1e3,
                "load": self.load_s / self.num_split * 1e3,
                "compute": self.compute_s / self.num_split * 1e3,
            }
        return out


def prefix_cache_lines(d: dict, offload: dict | None) -> list[str]:
    host = f"; {d['host_hit_rate'] * 100:.1f}% more loaded from the host tier" if "host_hit_rate" in d else ""
    if "disk_hit_rate" in d:
        host += f" and {d['disk_hit_rate'] * 100:.1f}% from its disk tier"
    lines = [
        (
            f"Prefix cache: {d['hit_rate'] * 100:.1f}% of prompt tokens found computed on the GPU{host}"
            f" ({d['queried_tokens']:,} prompt tokens over {d['num_requests']:,} admissions)"
        )
    ]
    if offload is not None:
        lines.append(
            f"Host KV tier: {offload['size_gib']:g} GiB per GPU ({offload['num_blocks']:,} blocks),"
            f" {_bytes(offload['stored_bytes'])} stored, {_bytes(offload['loaded_bytes'])} loaded"
            f" over {offload['host_link_gb_s']:g} GB/s in {offload['num_loads']:,} loads"
            f" ({offload['load_s'] * 1e3:,.1f} ms loading, summed over requests)"
        )
        if "disk" in offload:
            disk = offload["disk"]
            lines.append(
                f"Disk KV tier: {disk['disk_gib']:g} GiB per GPU ({disk['num_blocks']:,} blocks),"
                f" {_bytes(disk['written_bytes'])} written ({disk['write_s']:,.1f} s of writes per GPU at"
                f" {disk['disk_write_gb_s']:g} GB/s), {_bytes(disk['read_bytes'])} read at {disk['disk_read_gb_s']:g}"
                f" GB/s in {disk['num_loads']:,} loads; writes queued up to {_seconds(disk['max_write_backlog_s'])} behind"
                + (
                    f", {disk['num_unwritten_lookups']:,} lookups stopped at a block not written yet"
                    if disk["num_unwritten_lookups"]
                    else ""
                )
            )
    if "mean_ttft_split_ms" in d:
        split, tiers = d["mean_ttft_split_ms"], "host and its disk" if "disk_hit_rate" in d else "host"
        lines.append(
            f"TTFT, mean: queueing {split['queueing']:,.1f} ms, loading from the {tiers} {split['load']:,.1f} ms,"
            f" computing {split['compute']:,.1f} ms"
        )
    return lines


def _seconds(s: float) -> str:
    return f"{s * 1e3:,.1f} ms" if s < 1 else f"{s:,.1f} s"


def _bytes(n: float) -> str:
    unit, scale = next(((u, s) for u, s in (("GiB", 2**30), ("MiB", 2**20)) if n >= s), ("KiB", 2**10))
    return f"{n / scale:,.1f} {unit}"
