"""The simulator's host link: a replica's loads from its host KV tier (sim/host_tier.py) timed on the SimPy clock.

A load moves its blocks' bytes (per GPU: each GPU of a tensor-parallel engine copies its own heads over its own
PCIe link) at `engine.kv_offload.host_link_gb_s`; loads in flight at once share the link evenly
(sim/link_clock.py, as the fleet's KV pulls). Stores (GPU to host) travel the other direction of the
full-duplex link on their own CUDA stream in vLLM (the offloading worker's transfer handlers), so they delay
neither loads nor steps here. The loads run beside the replica's steps: a request waits for its own load, others
are scheduled meanwhile (vLLM's `load_kv_async`).
"""

from __future__ import annotations

from collections.abc import Callable

import simpy

from sim.disk_tier import disk_load_s
from sim.host_tier import HostTier
from sim.link_clock import LinkClock
from sim.request import Request
from sim.scheduler_base import Scheduler

HOST, GPU = "host", "gpu"  # the link's two ends: every load of a replica shares them


class HostLink:
    """A replica's host link: its loads in flight, each request handed back (done) once its blocks are in."""

    def __init__(self, env: simpy.Environment, tier: HostTier, done: Callable[[Request], None]):
        self.env, self.tier, self.done = env, tier, done
        self.loading: dict[int, tuple[Request, float]] = {}  # request id -> (request, load start)
        self.clock = LinkClock(env, self._loaded)

    def load(self, request: Request, num_blocks: int) -> None:
        """Start copying num_blocks blocks in for request (the last of them from the disk tier, as many as its
        lookup found there); `done(request)` once they are there."""
        self.loading[request.request_id] = (request, self.env.now)
        tier, num_disk = self.tier, self.tier.last_disk_hits
        solo_s = disk_load_s(num_blocks - num_disk, num_disk, tier.block_bytes, tier.config)
        self.clock.add(request.request_id, solo_s, HOST, GPU)

    def _loaded(self, request_id: int) -> None:
        request, start_s = self.loading.pop(request_id)
        request.host_load_s += self.env.now - start_s
        self.done(request)


def host_link_of(env: simpy.Environment, scheduler: Scheduler, done: Callable[[Request], None]) -> HostLink | None:
    """The link of a scheduler's host tier, wired to it (its loads start there, `done` gets each request back once
    loaded); None without a tier."""
    host = scheduler.kv.host
    if host is None:
        return None
    link = HostLink(env, host, done)
    scheduler.on_host_load = link.load
    return link
