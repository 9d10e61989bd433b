"""Per-request KV bookkeeping over the block pool: block tables, prefix-cache hits, paged or contiguous.

Paged (vLLM): a request holds just the blocks its computed tokens need, one more whenever a block fills.
Contiguous (the pre-PagedAttention baseline): a request reserves `contiguous_tokens` slots (max_model_len)
up front, whether it will use them or not.
"""

from __future__ import annotations

from collections.abc import Sequence

from sim.block_pool import BlockPool
from sim.host_tier import HostTier
from sim.request import Request

ROOT_HASH = 0  # the parent hash of a request's first block


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def extend_chain(keys: list[tuple], request: Request, num_blocks: int, block_size: int) -> list[tuple]:
    """keys, the chained prefix-cache keys of the request's first blocks, extended to num_blocks of them: a block's
    key is its parent's hash and its content (vLLM's block hash), the first block's parent ROOT_HASH."""
    first = len(keys)
    if first < num_blocks:
        parent = hash(keys[-1]) if first else ROOT_HASH
        for content in request.block_content_keys(first, num_blocks, block_size):
            key = (parent, content)
            keys.append(key)
            parent = hash(key)
    return keys


class KVCacheManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool,
        contiguous_tokens: int | None = None,
        defer_private_blocks: bool = True,
        count_blocks_lazily: bool = False,
    ) -> None:
        self.pool = BlockPool(num_blocks, enable_caching, count_blocks_lazily)
        self.block_size = block_size
        self.contiguous_tokens = contiguous_tokens
        # Deferred registration (the simulator's speed): a block that only its own request can hit (simulated,
        # outside a shared prefix; Request.num_shareable_blocks) enters the prefix cache when the request is
        # preempted, not at allocation. Nobody can look it up in between (it is held, so it is not evicted
        # either), and a finished request's are never looked up: the same hits and evictions as registering at
        # allocation, without hashing every block of every request. False: register every full block at
        # allocation, as vLLM does (the reference the property tests compare with).
        self.defer_private_blocks = defer_private_blocks
        self._keys: dict[Request, list[tuple]] = {}  # _chain_keys' (by identity: Request compares by identity)
        # A KV tier in host memory (engine.kv_offload; sim/host_tier.py): every block registered here is stored
        # there too, and a waiting request looks there for the blocks past its GPU hits. None: no tier.
        self.host: HostTier | None = None

    def get_computed_blocks(self, request: Request) -> list[int]:
        """Leading full blocks of a new request already in the prefix cache.

        The last prompt token is always recomputed, as in vLLM: its logits are needed to sample.
        """
        if not self.pool.enable_caching:
            return []
        num_blocks = (request.num_tokens - 1) // self.block_size
        shareable = request.num_shareable_blocks(self.block_size)
        if shareable is not None and not request.num_preemptions:
            num_blocks = min(num_blocks, shareable)  # its own blocks were never cached: no need to look
        if num_blocks <= 0:
            return []
        return self.pool.lookup_prefix(self._chain_keys(request, num_blocks)[:num_blocks])

    def block_keys(self, request: Request, first: int, stop: int) -> list[tuple]:
        """The prefix-cache keys of the request's blocks first .. stop - 1 (the host tier's keys too)."""
        return self._chain_keys(request, stop)[first:stop]

    def get_host_blocks(self, request: Request, num_gpu_hits: int) -> int:
        """How many blocks past its GPU hits a new request finds in the host tier (vLLM's OffloadingConnector,
        `get_num_new_matched_tokens`: the leading run after the GPU's, the last prompt token left to compute)."""
        num_blocks = (request.num_tokens - 1) // self.block_size
        shareable = request.num_shareable_blocks(self.block_size)
        if shareable is not None and not request.num_preemptions:
            num_blocks = min(num_blocks, shareable)
        if num_blocks <= num_gpu_hits:
            return 0
        return self.host.lookup(self._chain_keys(request, num_blocks)[num_gpu_hits:num_blocks])

    def _chain_keys(self, request: Request, num_blocks: int) -> list[tuple]:
        """The chained prefix-cache keys of the request's first num_blocks blocks (at least). A full block's
        tokens never change, nor do its key: they are kept until the request finishes, as the queue's head
        is looked up again at every step while it waits (a preempted request: every block it had)."""
        keys = self._keys.get(request)
        if keys is None:
            keys = self._keys[request] = []
        return extend_chain(keys, request, num_blocks, self.block_size)

    def num_cached_prefix_blocks(self, request: Request) -> int:
        """Leading full blocks of a request not sent here (yet) that this pool's prefix cache holds: a router's
        question (sim/router.py), answered without changing anything here."""
        if not self.pool.enable_caching:
            return 0
        num_blocks = (request.num_tokens - 1) // self.block_size
        shareable = request.num_shareable_blocks(self.block_size)
        if shareable is not None:
            num_blocks = min(num_blocks, shareable)
        keys = extend_chain(list(self._keys.get(request, ())), request, num_blocks, self.block_size)
        return len(self.pool.lookup_prefix(keys[:num_blocks]))

    def blocks_needed(
        self, request: Request, num_new_tokens: int, num_hit_blocks: int = 0, reserve_tokens: int = 0
    ) -> int:
        """New blocks to hold the request's computed tokens plus num_new_tokens (and any reservation)."""
        tokens = request.num_computed_tokens + num_hit_blocks * self.block_size + num_new_tokens
        tokens = max(tokens, reserve_tokens, self.contiguous_tokens or 0)
        return cdiv(tokens, self.block_size) - len(request.block_ids) - num_hit_blocks

    def full_sequence_fits(self, request: Request, hit_blocks: Sequence[int] = ()) -> bool:
        """vLLM's admission check for a waiting or preempted request (`allocate_slots(...,
        full_sequence_must_fit=True)`, vllm/v1/core/kv_cache_manager.py; SchedulerConfig.scheduler_reserve_full_isl,
        on by default since PR #37307): the blocks of its whole current sequence, prompt and tokens sampled so far,
        fit in the free blocks, where only the first chunk's are then allocated. Without it a long prompt admitted
        on its first chunk ran the pool out halfway and was preempted over and over (5,993 preemptions for 3 on
        an L4 fed 4k-14k-token prompts)."""
        tokens = max(request.num_tokens, self.contiguous_tokens or 0)
        needed = cdiv(tokens, self.block_size) - len(request.block_ids) - len(hit_blocks)
        return needed <= self.pool.num_free_blocks - self.pool.num_free_of(hit_blocks)

    def allocate_slots(
        self, request: Request, num_new_tokens: int, hit_blocks: Sequence[int] = (), reserve_tokens: int = 0
    ) -> bool:
        """Make room for num_new_tokens more; False (and nothing changed) when the pool is short.

        As vLLM v1's `KVCacheManager.allocate_slots` (vllm/v1/core/kv_cache_manager.py, v0.11 to current
        main), the full blocks the step will compute are registered in the prefix cache now, at allocation,
        not once computed: a request admitted later in the same step can hit them (the step writes every
        row's K/V before any row's attention reads it).
        """
        pool = self.pool
        needed = self.blocks_needed(request, num_new_tokens, len(hit_blocks), reserve_tokens)
        if needed > 0 or hit_blocks:  # else the common decode step: the last block still has room
            # Hit blocks nobody references sit in the free queue: taking them shrinks what is free.
            free = pool.num_free_blocks - pool.num_free_of(hit_blocks)
            if needed > free:
                return False
            if hit_blocks:
                pool.touch(hit_blocks)
                request.block_ids.extend(hit_blocks)
                request.num_computed_tokens += len(hit_blocks) * self.block_size
            if needed > 0:
                request.block_ids.extend(pool.get_new_blocks(needed))
        # vLLM caps this at num_tokens: tokens not sampled yet (a reservation, speculative slots) are unknown.
        self.cache_full_blocks(request, min(request.num_computed_tokens + num_new_tokens, request.num_tokens))
        return True

    def shared_tokens(self) -> int:
        """Tokens counted once per request sharing a prefix block beyond the first (all shared blocks are full)."""
        return self.pool.num_shared_refs * self.block_size

    def cache_full_blocks(self, request: Request, num_tokens: int | None = None) -> None:
        """Register the full blocks among the request's first num_tokens tokens (default: its computed ones)
        in the prefix cache; those already registered (hits among them) are skipped, deferred ones too."""
        if not self.pool.enable_caching:
            return
        if num_tokens is None:
            num_tokens = request.num_computed_tokens
        num_full = min(num_tokens // self.block_size, len(request.block_ids))
        if self.defer_private_blocks:
            shareable = request.num_shareable_blocks(self.block_size)
            if shareable is not None and shareable < num_full:
                num_full = shareable
        self._register(request, num_full)

    def _register(self, request: Request, num_full: int) -> None:
        """Register the request's blocks [num_cached_blocks, num_full) under their chained keys."""
        if num_full <= request.num_cached_blocks:
            return  # most calls: a decode step fills no block, or registration is deferred
        keys = self._chain_keys(request, num_full)
        for i in range(request.num_cached_blocks, num_full):
            request.block_hashes.append(hash(keys[i]))
            self.pool.cache_block(request.block_ids[i], keys[i])
        if self.host is not None:
            first = request.num_cached_blocks
            self.host.store(keys[first:num_full], request.block_ids[first:num_full])
        request.num_cached_blocks = num_full

    def free_preempted(self, request: Request) -> None:
        """Free a preempted request's blocks. It will come back for them: the blocks whose registration was
        deferred enter the prefix cache first, as far as registering at allocation would have taken them
        (its computed tokens: every allocation registers up to what the step then computes)."""
        if self.pool.enable_caching and self.defer_private_blocks:
            self._register(request, min(request.num_computed_tokens // self.block_size, len(request.block_ids)))
        self.free(request)

    def free(self, request: Request) -> None:
        if request.is_finished:
            self._keys.pop(request, None)
        self.pool.free_blocks(reversed(request.block_ids))
        request.block_ids = []
        request.block_hashes = []
        request.num_cached_blocks = 0
