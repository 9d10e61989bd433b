"""vLLM's hybrid KV cache allocator: a request's blocks per KV cache group, sliding-window groups freeing what
leaves the window, all groups drawing from one block pool.

vLLM v1 splits a model's attention layers into KV cache groups (`_get_kv_cache_groups_uniform_page_size`,
vllm/v1/core/kv_cache_utils.py; sim/kv_sizing.py's `kv_cache_groups`, an engine's `EngineFacts.kv_cache_groups`). Every group holds its own block table
per request, drawn from one `BlockPool` of `kv_cache_config.num_blocks` blocks, each the page of one layer
slot (`KVCacheCoordinator.__init__`, vllm/v1/core/kv_cache_coordinator.py). A full-attention group holds
ceil(tokens / block_size) blocks (`FullAttentionManager`); a sliding-window group replaces the blocks that
left the window with the null block and frees them (`SlidingWindowManager.get_num_skipped_tokens`,
`SingleTypeKVCacheManager.remove_skipped_blocks`, vllm/v1/core/single_type_kv_cache_manager.py, current
main). Prefix-cache hits are found as `HybridKVCacheCoordinator.find_longest_cache_hit` does: full groups
left to right, then sliding groups right to left within that length, needing the window's blocks.

Dense models (one full-attention group) keep sim/kv_manager.py's `KVCacheManager`. So do the static
scheduler and contiguous KV (the baselines keep every layer's whole context, as an engine without paged
sliding windows does): their pool is memory.num_gpu_blocks blocks of every group's slots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.block_pool import NULL_BLOCK_ID
from sim.engine_facts import EngineFacts
from sim.kv_manager import ROOT_HASH, KVCacheManager, cdiv
from sim.memory import MemoryBreakdown
from sim.request import Request


@dataclass(frozen=True)
class KVGroups:
    """The KV cache groups of a model with sliding-window layers, in vLLM's order."""

    sliding: tuple[bool, ...]  # per group: a sliding-window group (else full attention)
    sliding_window: int  # tokens a sliding layer attends to, itself included

    @property
    def num_groups(self) -> int:
        return len(self.sliding)


def kv_groups(facts: EngineFacts) -> KVGroups | None:
    """The groups vLLM's hybrid allocator makes, or None when the plain KVCacheManager serves the engine
    (`EngineFacts.hybrid_kv` false: no sliding-window layer, the static scheduler or contiguous KV). vLLM lists
    the groups by layer type in the order the types first appear among the layers (a dict keyed by spec, filled
    layer by layer)."""
    if not facts.hybrid_kv:
        return None
    m, groups, sliding = facts.model, facts.kv_cache_groups, facts.sliding_groups
    types = [True] * sliding, [False] * (groups - sliding)
    first_is_sliding = 0 in m.sliding_layers
    return KVGroups(tuple(types[0] + types[1] if first_is_sliding else types[1] + types[0]), m.sliding_window)


def kv_pool_blocks(facts: EngineFacts, mem: MemoryBreakdown) -> int:
    """Blocks of the pool the scheduler allocates from. With the hybrid allocator, vLLM's
    `kv_cache_config.num_blocks`: the KV memory over one layer slot of every group (`get_num_blocks`) or
    engine.num_gpu_blocks_override, which sets exactly that; memory.num_gpu_blocks is that // groups (what
    vLLM's "GPU KV cache size" counts). Otherwise memory.num_gpu_blocks."""
    if not facts.hybrid_kv:
        return mem.num_gpu_blocks
    if facts.engine.num_gpu_blocks_override is not None:
        return facts.engine.num_gpu_blocks_override
    return max(0, mem.kv_cache_bytes) // (mem.block_bytes // facts.kv_cache_groups)


class GroupHits(list):
    """Prefix-cache hits of every group: as a list, the first group's blocks (its length, the hit in blocks,
    is what the scheduler reads); `by_group` holds each group's, the null block where a window skips."""

    def __init__(self, by_group: list[list[int]]) -> None:
        super().__init__(by_group[0])
        self.by_group = by_group


class HybridKVCacheManager(KVCacheManager):
    """KVCacheManager over the groups of vLLM's hybrid allocator (one group: a model whose every layer has a
    window). request.block_ids is the first group's table (the live engine's, for a one-group model); the
    other groups' tables are kept here. Every full block is registered in the prefix cache at allocation, as
    vLLM does (no deferred registration: a sliding group registers its blocks before the window frees them
    anyway)."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_caching: bool,
        groups: KVGroups,
        admission_cap_blocks: int | None = None,
    ) -> None:
        super().__init__(num_blocks, block_size, enable_caching, None, defer_private_blocks=False)
        # The most blocks a sliding group holds for one request at once (vLLM's
        # SlidingWindowSpec.max_admission_blocks_per_request: the window plus a step's tokens, and a block the
        # window's start may fall in): what its admission check asks of a sliding group (full_sequence_fits);
        # None: uncapped.
        self.admission_cap_blocks = admission_cap_blocks
        self.groups = groups
        self.full_ids = [g for g, s in enumerate(groups.sliding) if not s]
        self.sliding_ids = [g for g, s in enumerate(groups.sliding) if s]
        self._tables: dict[int, list[list[int]]] = {}  # request_id -> block table per group

    def tables(self, request: Request) -> list[list[int]]:
        """The request's block table in each group (the first is request.block_ids)."""
        tables = self._tables.get(request.request_id)
        if tables is None or tables[0] is not request.block_ids:
            tables = [request.block_ids] + [[] for _ in range(self.groups.num_groups - 1)]
            self._tables[request.request_id] = tables
        return tables

    def num_skipped_tokens(self, group: int, num_computed_tokens: int) -> int:
        """`SlidingWindowManager.get_num_skipped_tokens`: the tokens before the next token's window."""
        if not self.groups.sliding[group]:
            return 0
        return max(0, num_computed_tokens - self.groups.sliding_window + 1)

    # --- prefix cache ---

    def _key(self, parent: int, content: object, group: int) -> tuple:
        return (parent, (group, content))  # vLLM: BlockHashWithGroupId, one cache entry per group

    def get_computed_blocks(self, request: Request) -> GroupHits:
        """`HybridKVCacheCoordinator.find_longest_cache_hit` (one pass: full attention first, then the sliding
        groups within its hit, as vLLM's "simple hybrid" exits), or the unitary coordinator's for one group.
        The last prompt token is always recomputed."""
        num_groups = self.groups.num_groups
        if not self.pool.enable_caching:
            return GroupHits([[] for _ in range(num_groups)])
        bs, pool = self.block_size, self.pool
        max_blocks = (request.num_tokens - 1) // bs
        shareable = request.num_shareable_blocks(bs)
        if shareable is not None and not request.num_preemptions:
            max_blocks = min(max_blocks, shareable)  # its own blocks were never cached: no need to look
        contents, parents, parent = [], [], ROOT_HASH
        for i in range(max_blocks):
            content = request.block_content_key(i, bs)
            contents.append(content)
            parents.append(parent)
            parent = hash((parent, content))
        hits: list[list[int] | None] = [None] * num_groups

        def cached(i: int, ids: list[int]) -> list[int] | None:
            """Block i of every group in ids, if all are cached (`BlockPool.get_cached_block`)."""
            found = [pool.lookup(self._key(parents[i], contents[i], g)) for g in ids]
            return None if None in found else found

        num_hit = max_blocks
        if self.full_ids:  # `FullAttentionManager.find_longest_cache_hit`: left to right
            full = [[] for _ in self.full_ids]
            for i in range(max_blocks):
                found = cached(i, self.full_ids)
                if found is None:
                    break
                for blocks, b in zip(full, found):
                    blocks.append(b)
            num_hit = len(full[0])
            for g, blocks in zip(self.full_ids, full):
                hits[g] = blocks
        if self.sliding_ids:  # `SlidingWindowManager.find_longest_cache_hit`: right to left
            needed = cdiv(self.groups.sliding_window - 1, bs)  # contiguous blocks the next token's window reads
            sliding = [[NULL_BLOCK_ID] * num_hit for _ in self.sliding_ids]
            run, match = 0, False
            for i in range(num_hit - 1, -1, -1):
                found = cached(i, self.sliding_ids)
                if found is None:
                    run = 0
                    continue
                for blocks, b in zip(sliding, found):
                    blocks[i] = b
                run += 1
                if run >= needed:
                    for blocks in sliding:
                        del blocks[i + run :]
                    match = True
                    break
            if not match:
                for blocks in sliding:
                    del blocks[run:]  # the first `run` blocks hit even if fewer than the window needs
            num_hit = len(sliding[0])
            for g, blocks in zip(self.sliding_ids, sliding):
                hits[g] = blocks
        return GroupHits([blocks[:num_hit] for blocks in hits])

    def num_cached_prefix_blocks(self, request: Request) -> int:
        """A router's question (sim/router.py): get_computed_blocks changes nothing here."""
        return len(self.get_computed_blocks(request))

    def cache_full_blocks(self, request: Request, num_tokens: int | None = None) -> None:
        """Register the full blocks among the request's first num_tokens tokens (default: its computed ones)
        in every group; null blocks are skipped (`BlockPool.cache_full_blocks`)."""
        if not self.pool.enable_caching:
            return
        if num_tokens is None:
            num_tokens = request.num_computed_tokens
        tables, bs, hashes = self.tables(request), self.block_size, request.block_hashes
        num_full = min(num_tokens // bs, len(tables[0]))
        for i in range(request.num_cached_blocks, num_full):
            parent, content = hashes[i - 1] if i else ROOT_HASH, request.block_content_key(i, bs)
            hashes.append(hash((parent, content)))
            for g, blocks in enumerate(tables):
                if blocks[i] != NULL_BLOCK_ID:
                    self.pool.cache_block(blocks[i], self._key(parent, content, g))
        request.num_cached_blocks = max(request.num_cached_blocks, num_full)

    # --- allocation ---

    def _remove_skipped_blocks(self, tables: list[list[int]], num_computed_tokens: int) -> None:
        """`SingleTypeKVCacheManager.remove_skipped_blocks`: a sliding group's blocks wholly before the window
        become the null block and go back to the pool (latest first; they stay cached until reused)."""
        for g in self.sliding_ids:
            blocks = tables[g]
            removed = []
            for i in range(
                min(self.num_skipped_tokens(g, num_computed_tokens) // self.block_size, len(blocks)) - 1, -1, -1
            ):
                if blocks[i] == NULL_BLOCK_ID:
                    break  # those before it went in an earlier call
                removed.append(blocks[i])
                blocks[i] = NULL_BLOCK_ID
            if removed:
                self.pool.free_blocks(removed)

    def _num_blocks_to_allocate(
        self,
        tables: list[list[int]],
        hits: Sequence[Sequence[int]],
        num_computed_tokens: int,
        num_tokens: int,
        admission_cap: bool = False,
    ) -> int:
        """`KVCacheCoordinator.get_num_blocks_to_allocate` summed over the groups: the blocks to reach
        num_tokens past what the group holds, its hits and (sliding) the skipped part; plus hit blocks that
        sit in the free queue (taking them shrinks what is free). `admission_cap`: a sliding group's
        requirement capped at admission_cap_blocks, as vLLM's admission check caps it."""
        bs, ref_cnt, total = self.block_size, self.pool.ref_cnt, 0
        for g, blocks in enumerate(tables):
            required = cdiv(num_tokens, bs)
            if admission_cap and self.admission_cap_blocks is not None and self.groups.sliding[g]:
                required = min(required, self.admission_cap_blocks)
            group_hits = hits[g] if hits else ()
            skipped = self.num_skipped_tokens(g, num_computed_tokens) // bs
            total += max(required - max(skipped, len(group_hits) + len(blocks)), 0)
            total += sum(
                1 for b in group_hits[max(0, skipped - len(blocks)) :] if b != NULL_BLOCK_ID and ref_cnt[b] == 0
            )
        return total

    def full_sequence_fits(self, request: Request, hit_blocks: Sequence[int] = ()) -> bool:
        """vLLM's admission check (KVCacheManager.full_sequence_fits) over the groups, a sliding group's
        requirement capped at what it holds at once."""
        hits = getattr(hit_blocks, "by_group", None) or ()
        computed = request.num_computed_tokens + len(hit_blocks) * self.block_size
        tables = self.tables(request)
        needed = self._num_blocks_to_allocate(tables, hits, computed, request.num_tokens, admission_cap=True)
        return needed <= self.pool.num_free_blocks

    def blocks_needed(
        self, request: Request, num_new_tokens: int, num_hit_blocks: int = 0, reserve_tokens: int = 0
    ) -> int:
        """New blocks, over every group, for the computed tokens plus num_new_tokens (hits not counted)."""
        computed = request.num_computed_tokens + num_hit_blocks * self.block_size
        tables = self.tables(request)
        return self._num_blocks_to_allocate(tables, (), computed, max(computed + num_new_tokens, reserve_tokens))

    def allocate_slots(
        self, request: Request, num_new_tokens: int, hit_blocks: Sequence[int] = (), reserve_tokens: int = 0
    ) -> bool:
        """vLLM v1's `KVCacheManager.allocate_slots` over the groups: free what left the window (even when
        the allocation then fails, as vLLM), check the pool, take the hits, allocate each group's new
        blocks in group order, register the full blocks the step will compute."""
        bs, tables = self.block_size, self.tables(request)
        hits = getattr(hit_blocks, "by_group", None)
        num_hit = len(hit_blocks)
        computed = request.num_computed_tokens + num_hit * bs
        num_tokens = max(computed + num_new_tokens, reserve_tokens)
        self._remove_skipped_blocks(tables, computed)
        if self._num_blocks_to_allocate(tables, hits or (), computed, num_tokens) > self.pool.num_free_blocks:
            return False
        if num_hit:  # `allocate_new_computed_blocks`: a new request; hits before its window are not taken
            for g, blocks in enumerate(tables):
                skipped = self.num_skipped_tokens(g, computed) // bs
                taken = [b for b in hits[g][skipped:] if b != NULL_BLOCK_ID]
                self.pool.touch(taken)
                blocks += [NULL_BLOCK_ID] * skipped + list(hits[g][skipped:])
            self._hash_hit_blocks(request, num_hit)
            request.num_computed_tokens = computed
        for blocks in tables:  # `allocate_new_blocks`, group after group
            n = cdiv(num_tokens, bs) - len(blocks)
            if n > 0:
                blocks += self.pool.get_new_blocks(n)
        self.cache_full_blocks(request, min(computed + num_new_tokens, request.num_tokens))
        return True

    def _hash_hit_blocks(self, request: Request, num_hit: int) -> None:
        """The chained hashes of the hit blocks, which are cached already (vLLM: num_cached_block = hits)."""
        hashes = request.block_hashes
        for i in range(len(hashes), num_hit):
            hashes.append(hash((hashes[i - 1] if i else ROOT_HASH, request.block_content_key(i, self.block_size))))
        request.num_cached_blocks = num_hit

    def tokens_in_slots(self, computed: int, context: int) -> int:
        """The tokens a request's blocks hold over every group during a step that takes it from `computed` to
        `context` tokens: a full group all of them, a sliding group those from its first block still held
        (the blocks wholly before the window were freed when the step's slots were allocated)."""
        block_size = self.block_size
        groups = range(self.groups.num_groups)
        return sum(context - self.num_skipped_tokens(g, computed) // block_size * block_size for g in groups)

    def shared_tokens(self) -> int:
        """Prefix tokens stored once for several requests: the pool's shared references over the groups
        (exact for full-attention groups; a sliding group shares only the hits inside its window)."""
        return self.pool.num_shared_refs * self.block_size // self.groups.num_groups

    def free_preempted(self, request: Request) -> None:
        self.free(request)  # nothing deferred: every full block was registered at allocation

    def free(self, request: Request) -> None:
        """Every group's blocks back to the pool, group after group, each tail first (`KVCacheCoordinator.free`);
        the null block is not freed."""
        for blocks in self._tables.pop(request.request_id, [request.block_ids]):
            self.pool.free_blocks([b for b in reversed(blocks) if b != NULL_BLOCK_ID])
        request.block_ids = []
        request.block_hashes = []
        request.num_cached_blocks = 0
