"""A fleet's router: which replica (of which pool) a request goes to, from what a real router sees.

Policies (`fleet.router.policy`):
- round_robin: every entry replica in turn (the pools' replicas in the file's order);
- least_outstanding: the replica with the fewest requests sent and not finished, the first of those tied;
- prefix: the replica whose prefix cache holds the longest run of the prompt's leading blocks (llm-d's
  prefix-cache scorer, Dynamo's KV-aware router), ties to the least outstanding;
- length: prompts of at most threshold_tokens to short_pool, longer ones to long_pool (inference-fleet-sim's
  two-pool split), then the least outstanding replica of that pool.

A prefill/decode fleet routes twice, as vLLM's disaggregated proxy does: the request to a prefill replica by the
policy, then, once prefilled, to a decode replica: the least outstanding one (round robin under round_robin). The
router reads the replicas (`num_outstanding`, the KV managers' `num_cached_prefix_blocks`) and changes nothing.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from sim.config import FleetRouterConfig
from sim.request import Request


class RoutedReplica(Protocol):
    """What the router reads of an engine: sim.replica.Replica, or the live engine's."""

    @property
    def num_outstanding(self) -> int: ...

    scheduler: object  # its `.kv.num_cached_prefix_blocks(request)`, for the prefix policy


class FleetRouter:
    """`entry` replicas take new requests (a prefill pool's, or every mixed pool's); `decode` replicas take the
    prefilled ones. `entry_pool` (the pools' replica lists, by name) is what the length policy picks from."""

    def __init__(
        self,
        config: FleetRouterConfig,
        entry_pools: dict[str, list[RoutedReplica]],
        decode: list[RoutedReplica] | None = None,
    ) -> None:
        self.config = config
        self.entry_pools = entry_pools
        self.entry = [replica for replicas in entry_pools.values() for replica in replicas]
        self.decode_replicas = decode or []
        self._turn = itertools.count()
        self._decode_turn = itertools.count()

    def route(self, request: Request) -> RoutedReplica:
        """The replica a new request goes to."""
        policy = self.config.policy
        if policy == "round_robin":
            return self.entry[next(self._turn) % len(self.entry)]
        if policy == "length":
            c = self.config
            pool = c.short_pool if request.num_prompt_tokens <= c.threshold_tokens else c.long_pool
            return least_outstanding(self.entry_pools[pool])
        if policy == "prefix":
            # max() keeps the first of the best: sort by (cached blocks, -outstanding)
            return max(self.entry, key=lambda r: (r.scheduler.kv.num_cached_prefix_blocks(request), -r.num_outstanding))
        return least_outstanding(self.entry)

    def route_decode(self, request: Request) -> RoutedReplica:
        """The decode replica a prefilled request goes to."""
        if self.config.policy == "round_robin":
            return self.decode_replicas[next(self._decode_turn) % len(self.decode_replicas)]
        return least_outstanding(self.decode_replicas)


def least_outstanding(replicas: list[RoutedReplica]) -> RoutedReplica:
    return min(replicas, key=lambda r: r.num_outstanding)
