"""The block pool (sim/block_pool.py) against vLLM's BlockPool written as plainly as it can be: every block in
one LRU free queue from the start, one block at a time. Random sequences of allocations, frees, prefix hits
and cache registrations must hand out the same block ids and leave the same ref counts, free queue and prefix
cache, on the pool's fast paths (never-used blocks, frees of unshared blocks) and its general ones, with ref
counts kept from the start (the live engine) or lazily from the first block cached (the simulator)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.block_pool import NULL_BLOCK_ID, BlockPool
from sim.request import Request


class ReferencePool:
    """vLLM v1's BlockPool, per block: the free queue starts as every block but the null one, in id order."""

    def __init__(self, num_blocks: int) -> None:
        self.ref_cnt = [0] * num_blocks
        self.free = [b for b in range(num_blocks) if b != NULL_BLOCK_ID]
        self.cached: dict = {}
        self.block_key: list = [None] * num_blocks

    def get_new_blocks(self, n: int) -> list[int]:
        ids, self.free = self.free[:n], self.free[n:]
        for block_id in ids:
            if self.block_key[block_id] is not None:  # evicted
                del self.cached[self.block_key[block_id]]
                self.block_key[block_id] = None
            self.ref_cnt[block_id] = 1
        return ids

    def touch(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            if self.ref_cnt[block_id] == 0:
                self.free.remove(block_id)
            self.ref_cnt[block_id] += 1

    def free_blocks(self, block_ids: list[int]) -> None:
        for block_id in block_ids:
            self.ref_cnt[block_id] -= 1
            assert self.ref_cnt[block_id] >= 0
            if self.ref_cnt[block_id] == 0:
                self.free.append(block_id)

    def cache_block(self, block_id: int, key: tuple) -> None:
        if self.block_key[block_id] is None and key not in self.cached:
            self.cached[key] = block_id
            self.block_key[block_id] = key


def assert_same(pool: BlockPool, ref: ReferencePool, counts: bool = True) -> None:
    """counts=False leaves the per-block state unread (reading it makes a lazy pool keep it from then on)."""
    n = pool.num_blocks
    assert list(range(pool.num_touched, n)) + pool.free_block_queue == ref.free  # never-used blocks first
    assert pool.num_free_blocks == len(ref.free) and pool.num_used_blocks == n - 1 - len(ref.free)
    assert pool.cached_blocks == ref.cached
    if not counts:
        return
    assert pool.ref_cnt + [0] * (n - pool.num_touched) == ref.ref_cnt
    assert pool.block_key + [None] * (n - pool.num_touched) == ref.block_key
    assert pool.num_shared_refs == sum(max(count - 1, 0) for count in ref.ref_cnt)


@pytest.mark.parametrize("count_lazily", [False, True], ids=["counted", "lazy"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(num_blocks=st.integers(2, 24), data=st.data())
def test_the_pool_matches_vllms_block_pool_per_block(count_lazily, num_blocks, data):
    pool, ref = BlockPool(num_blocks, enable_caching=True, count_lazily=count_lazily), ReferencePool(num_blocks)
    held: list[list[int]] = []  # requests' block tables
    keys = [(parent, content) for parent in range(3) for content in range(3)]  # few: collisions happen
    for _ in range(data.draw(st.integers(1, 60), label="num_ops")):
        op = data.draw(st.sampled_from(["get", "free", "hit", "cache", "counts"]), label="op")
        if op == "get":
            n = data.draw(st.integers(0, min(len(ref.free), 8)), label="n")
            ids = pool.get_new_blocks(n)
            assert ids == ref.get_new_blocks(n)
            held.append(ids)
        elif op == "free" and held:
            blocks = held.pop(data.draw(st.integers(0, len(held) - 1), label="request"))
            pool.free_blocks(reversed(blocks))  # as the KV manager passes them: tail first
            ref.free_blocks(blocks[::-1])
        elif op == "hit" and ref.cached:
            found = data.draw(st.lists(st.sampled_from(sorted(ref.cached)), max_size=4, unique=True), label="hit")
            ids = [pool.lookup(key) for key in found]
            assert ids == [ref.cached[key] for key in found]
            missing = [key for key in keys if key not in ref.cached]
            assert pool.lookup_prefix(found + missing[:1] + found) == ids  # up to the first miss
            pool.touch(ids)
            ref.touch(ids)
            held.append(ids)
        elif op == "cache" and any(held):
            block_id = data.draw(st.sampled_from([b for blocks in held for b in blocks]), label="block")
            key = data.draw(st.sampled_from(keys), label="key")
            pool.cache_block(block_id, key)
            ref.cache_block(block_id, key)
        # A lazy pool's counts are read only when drawn ("counts") or once it keeps them (after a cache).
        assert_same(pool, ref, counts=not count_lazily or op == "counts" or bool(ref.cached))
    for blocks in held:
        pool.free_blocks(reversed(blocks))
        ref.free_blocks(blocks[::-1])
    assert_same(pool, ref)
    assert pool.num_shared_refs == 0 and pool.num_used_blocks == 0


@pytest.mark.parametrize("shared", [False, True], ids=["unshared", "shared"])
@pytest.mark.parametrize(
    ("freed_before", "freed", "bad"), [([], [3, 3], 3), ([], [2, NULL_BLOCK_ID], NULL_BLOCK_ID), ([1], [2, 1], 1)]
)
def test_a_block_freed_more_often_than_held_is_an_error(shared, freed_before, freed, bad):
    pool = BlockPool(8, enable_caching=False)
    pool.get_new_blocks(5)
    if shared:  # block 4 held twice: the general path
        pool.touch([4])
    pool.free_blocks(freed_before)
    with pytest.raises(AssertionError, match=f"block {bad} freed more often than allocated"):
        pool.free_blocks(freed)


def test_a_lazy_pool_catches_a_block_freed_twice_once_the_free_ones_outnumber_the_pool():
    pool = BlockPool(4, enable_caching=False, count_lazily=True)
    ids = pool.get_new_blocks(3)
    pool.free_blocks(ids[:2])
    pool.free_blocks(ids[:1])  # freed twice, block 3 still held: 3 free of 3, nothing to tell yet
    with pytest.raises(AssertionError, match="4 free blocks of 3: one freed twice"):
        pool.free_blocks(ids[2:])


@given(
    prefix_tokens=st.integers(0, 100),
    block_size=st.sampled_from([1, 4, 16]),
    first=st.integers(0, 12),
    count=st.integers(0, 12),
    live=st.booleans(),
)
def test_a_requests_block_content_keys_are_its_blocks_keys_one_by_one(prefix_tokens, block_size, first, count, live):
    tokens = list(range(1000, 1000 + (first + count) * block_size)) if live else None
    request = Request(7, 0.0, (first + count) * block_size, 4, tokens, prefix_group=3, prefix_tokens=prefix_tokens)
    expected = [request.block_content_key(i, block_size) for i in range(first, first + count)]
    assert request.block_content_keys(first, first + count, block_size) == expected
