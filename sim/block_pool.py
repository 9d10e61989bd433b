"""The paged KV block pool: ref counts, an LRU free queue and the prefix cache (vLLM v1's BlockPool).

Integer bookkeeping only; the live engine's KV tensors are indexed by the ids handed out here.
A block whose ref count drops to zero goes to the back of the free queue but keeps its cached content, so
a later request with the same prefix can take it back; new allocations take from the front (least
recently freed), evicting whatever was cached there.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from functools import partial
from itertools import takewhile
from operator import is_not, itemgetter

NULL_BLOCK_ID = 0


class BlockPool:
    """num_blocks as vLLM's num_gpu_blocks: block 0 is the null block (vLLM v1's `BlockPool.__init__` takes it
    off the free queue for padding and skipped slots; vllm/v1/core/block_pool.py, v0.11 to current main), so
    requests get num_blocks - 1 of them.

    count_lazily (the simulator's fast paths): no per-block ref counts until the first block is cached, so a
    block freed twice before then is caught only once the free blocks outnumber the pool's; the live engine,
    whose block ids index real KV tensors, counts from the start."""

    def __init__(self, num_blocks: int, enable_caching: bool, count_lazily: bool = False) -> None:
        if num_blocks < 2:
            raise ValueError(f"a block pool needs the null block and at least one more, got {num_blocks} blocks")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        # vLLM's free queue starts as every block but the null one in id order and freed blocks join its back,
        # so the front is the never-used blocks num_touched, num_touched + 1, ... until all were used once.
        # Those are not stored: the per-block state below grows as blocks are first handed out, so a pool of
        # millions of blocks (a tiny model on a large GPU) costs memory only for the blocks a run uses.
        self.num_touched = NULL_BLOCK_ID + 1  # the null block is never handed out
        # The rest of vLLM's free queue (a doubly linked list: O(1) append, pop-front and removal from the
        # middle), the blocks freed after use, is a Python list read from a moving head: handing out n blocks
        # is one slice, freeing them one extend; removal from the middle (a prefix hit on a free block) is a
        # search and a delete. The consumed front is dropped once it outgrows the rest.
        self._free: list[int] = []
        self._head = 0
        # (parent block hash, block content) -> block id. Keying on the content itself means a dict hit is
        # confirmed by comparing tokens, not only their hash.
        self.cached_blocks: dict[tuple[int, Hashable], int] = {}
        # References beyond a block's first, over all blocks: a prefix block shared by k requests adds k - 1.
        # Their tokens are stored once, so what the blocks hold is the requests' tokens minus these blocks'.
        self.num_shared_refs = 0
        # Per-block ref counts and cache keys, kept from the start, or lazily from the first block cached on:
        # until then none can be hit or shared, so a handed-out block is held once (count 1) and a free one not
        # at all (count 0), which the free queue already says. Handing out and freeing then touch no per-block
        # state (most simulations: no shared prefix, no preemption, nothing ever cached); `ref_cnt` builds it.
        self._counts_kept = False
        self._ref_cnt: list[int] = []
        self._block_key: list[tuple[int, Hashable] | None] = []
        if not count_lazily:
            self._keep_counts()

    @property
    def ref_cnt(self) -> list[int]:
        """Each touched block's ref count (index: block id; blocks num_touched and above: 0, never used)."""
        self._keep_counts()
        return self._ref_cnt

    @property
    def block_key(self) -> list[tuple[int, Hashable] | None]:
        """Each touched block's cache key, None when it caches nothing."""
        self._keep_counts()
        return self._block_key

    def _keep_counts(self) -> None:
        """Build the per-block state from the free queue, once: every touched block is held once but the free
        ones and the null block; nothing is cached yet."""
        if self._counts_kept:
            return
        self._ref_cnt = ref_cnt = [1] * self.num_touched
        ref_cnt[NULL_BLOCK_ID] = 0
        for block_id in self._free[self._head :]:
            ref_cnt[block_id] = 0
        self._block_key = [None] * self.num_touched
        self._counts_kept = True

    @property
    def free_block_queue(self) -> list[int]:
        """The free blocks that were used before, least recently freed first (a copy); the never-used ones,
        ahead of them in vLLM's queue, are num_touched .. num_blocks - 1."""
        return self._free[self._head :]

    @property
    def num_free_blocks(self) -> int:
        return len(self._free) - self._head + self.num_blocks - self.num_touched

    @property
    def num_usable_blocks(self) -> int:
        return self.num_blocks - 1  # all but the null block

    @property
    def num_used_blocks(self) -> int:
        """Blocks held by requests (vLLM's KV usage leaves the null block out too)."""
        return self.num_usable_blocks - self.num_free_blocks

    def get_new_blocks(self, n: int) -> list[int]:
        """Take n blocks from the front of the free queue (caller checks num_free_blocks first)."""
        first_fresh = self.num_touched
        num_fresh = self.num_blocks - first_fresh  # never used, at the queue's front: nothing cached in them
        counts_kept = self._counts_kept
        if n <= num_fresh:  # every call until all the pool's blocks were used once
            self.num_touched = first_fresh + n
            if counts_kept:
                self._ref_cnt += [1] * n
                self._block_key += [None] * n
            return list(range(first_fresh, first_fresh + n))
        free, head = self._free, self._head
        num_reused = n - num_fresh
        if num_reused > len(free) - head:
            raise ValueError(f"asked for {n} blocks with {self.num_free_blocks} free")
        reused = free[head : head + num_reused]
        head += num_reused
        if head > 1024 and 2 * head > len(free):
            del free[:head]
            head = 0
        self._head = head
        if counts_kept:
            ref_cnt, block_key = self._ref_cnt, self._block_key
            for block_id in reused:
                ref_cnt[block_id] = 1
            # Evict what the reused blocks cached: nothing when the cache is empty, and mostly nothing otherwise
            # (checked at C speed first: a key is a non-empty tuple, None when nothing is cached; the null
            # block, never cached, makes itemgetter return a tuple even for one block).
            if self.cached_blocks and any(itemgetter(*reused, NULL_BLOCK_ID)(block_key)):
                for block_id in reused:
                    if block_key[block_id] is not None:
                        del self.cached_blocks[block_key[block_id]]
                        block_key[block_id] = None
        if not num_fresh:
            return reused
        self.num_touched = self.num_blocks
        if counts_kept:
            self._ref_cnt += [1] * num_fresh
            self._block_key += [None] * num_fresh
        return [*range(first_fresh, self.num_blocks), *reused]

    def touch(self, block_ids: Iterable[int]) -> None:
        """Take a reference on cached blocks found by a prefix hit."""
        ref_cnt = self.ref_cnt
        taken = []  # free ones: they leave the free queue
        for block_id in block_ids:
            if ref_cnt[block_id] == 0:
                taken.append(block_id)
            else:
                self.num_shared_refs += 1
            ref_cnt[block_id] += 1
        if len(taken) == 1:
            del self._free[self._free.index(taken[0], self._head)]
        elif taken:  # one pass over the queue, not a search per block (a preempted request takes back dozens)
            taken_set = set(taken)
            num_free = len(self._free) - self._head
            self._free = [block_id for block_id in self._free[self._head :] if block_id not in taken_set]
            self._head = 0
            if len(self._free) != num_free - len(taken):  # as list.index's ValueError for one block
                raise AssertionError(f"blocks {taken} with no reference are not all in the free queue")

    def free_blocks(self, block_ids: Iterable[int]) -> None:
        """Drop one reference each; pass a request's blocks tail first so tails are evicted first."""
        if not self._counts_kept:
            # Each block is held once (nothing cached, nothing shared): all of them are freed, in the order
            # given. A block freed twice shows as more free blocks than the pool has.
            self._free += block_ids
            if self.num_free_blocks > self.num_usable_blocks:
                raise AssertionError(f"{self.num_free_blocks} free blocks of {self.num_usable_blocks}: one freed twice")
            return
        ref_cnt = self._ref_cnt
        if not self.num_shared_refs:
            # No block is held twice (num_shared_refs counts the references beyond a block's first), so each of
            # these has ref count 1 and all of them are freed, in the order given: the loop below's outcome
            # without its per-block branches and appends. A count of 0 is a block freed twice, here or before.
            block_ids = list(block_ids)
            for block_id in block_ids:
                if ref_cnt[block_id] != 1:
                    raise _freed_too_often(block_id)
                ref_cnt[block_id] = 0
            self._free += block_ids
            return
        freed = []
        for block_id in block_ids:
            count = ref_cnt[block_id] = ref_cnt[block_id] - 1
            if count == 0:
                freed.append(block_id)
            elif count > 0:
                self.num_shared_refs -= 1
            else:
                raise _freed_too_often(block_id)
        self._free += freed

    def num_free_of(self, block_ids: Sequence[int]) -> int:
        """How many of these blocks (prefix hits) are free: taking them shrinks what is free."""
        if not block_ids:
            return 0
        ref_cnt = self.ref_cnt
        return sum(1 for block_id in block_ids if ref_cnt[block_id] == 0)

    def lookup(self, key: tuple[int, Hashable]) -> int | None:
        return self.cached_blocks.get(key)

    def lookup_prefix(self, keys: Sequence[tuple[int, Hashable]]) -> list[int]:
        """The blocks cached under the leading keys, up to the first that is not (at C speed: a preempted
        request looks up every block it had)."""
        return list(takewhile(partial(is_not, None), map(self.cached_blocks.get, keys)))

    def cache_block(self, block_id: int, key: tuple[int, Hashable]) -> None:
        """Register a full, computed block under its chained key (first writer wins on duplicates)."""
        if not self._counts_kept:
            self._keep_counts()
        block_key = self._block_key
        if block_key[block_id] is None and key not in self.cached_blocks:
            self.cached_blocks[key] = block_id
            block_key[block_id] = key


def _freed_too_often(block_id: int) -> AssertionError:
    return AssertionError(f"block {block_id} freed more often than allocated")
