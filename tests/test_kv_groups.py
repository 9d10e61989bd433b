"""vLLM's hybrid KV cache allocator in the serving model (sim/kv_groups.py): sliding-window groups free the
blocks that leave the window, every group draws from one pool, prefix hits as vLLM's coordinator finds them."""

from __future__ import annotations

import pytest
from helpers.runs import assert_same_run
from helpers.scenarios import make_scenario
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.block_pool import NULL_BLOCK_ID
from sim.driver import simulate
from sim.engine_facts import EngineFacts
from sim.kv_groups import HybridKVCacheManager, KVGroups, kv_groups, kv_pool_blocks
from sim.memory import memory_breakdown
from sim.request import Request
from sim.scheduler import build_scheduler

NULL = NULL_BLOCK_ID


def _request(request_id: int, prompt: list[int], max_output_tokens: int = 4) -> Request:
    return Request(request_id, 0.0, len(prompt), max_output_tokens, prompt_token_ids=list(prompt))


def _step(kv: HybridKVCacheManager, request: Request, num_new: int) -> None:
    """Allocate and compute num_new tokens; a token is sampled when the prompt is done."""
    assert kv.allocate_slots(request, num_new)
    request.num_computed_tokens += num_new
    if request.num_computed_tokens >= request.num_tokens:
        request.output_token_ids.append(7)
        request.num_output_tokens += 1


def test_sliding_group_frees_blocks_that_leave_the_window():
    # block size 4, window 5 (vLLM: get_num_skipped_tokens(c) = c - 5 + 1), a full group then a sliding one
    kv = HybridKVCacheManager(32, 4, False, KVGroups((False, True), 5))
    r = _request(0, list(range(10)), max_output_tokens=8)
    _step(kv, r, 10)  # prefill: 3 blocks in each group
    full, sliding = kv.tables(r)
    assert full is r.block_ids and len(full) == len(sliding) == 3 and kv.pool.num_used_blocks == 6
    _step(kv, r, 1)  # computed 10: tokens 0..5 skipped -> block 0 (tokens 0-3) freed, no block needed
    assert sliding[0] == NULL and NULL not in sliding[1:] and kv.pool.num_used_blocks == 5
    _step(kv, r, 1)  # computed 11: 6 skipped, still one whole block
    assert kv.pool.num_used_blocks == 5
    _step(kv, r, 1)  # computed 12: 8 skipped -> block 1 freed; token 13 needs a 4th block in both groups
    assert sliding[:2] == [NULL, NULL] and len(full) == len(sliding) == 4 and NULL not in full
    assert kv.pool.num_used_blocks == 4 + 2
    kv.free(r)
    assert kv.pool.num_used_blocks == 0 and r.block_ids == []


def test_a_long_request_holds_the_window_in_sliding_groups_and_everything_in_full_ones():
    # gpt-oss-20b's layout: window 128, one sliding group and one full group
    kv = HybridKVCacheManager(4096, 16, False, KVGroups((True, False), 128))
    r = _request(0, list(range(3000)), max_output_tokens=500)
    for start in range(0, 3000, 512):  # chunked prefill
        _step(kv, r, min(512, 3000 - start))
    for _ in range(499):
        _step(kv, r, 1)
        sliding, full = kv.tables(r)
        held = [b for b in sliding if b != NULL]
        # the next token's window (127 tokens before it) spans at most ceil(127 / 16) + 1 blocks
        assert len(held) <= -(-127 // 16) + 1
        assert len(full) == -(-r.num_computed_tokens // 16) or len(full) == -(-(r.num_computed_tokens + 1) // 16)
        assert kv.pool.num_used_blocks == len(held) + len(full)
    # a chunk of 512 tokens holds its blocks while it is computed: what vLLM's max_memory_usage_bytes bounds
    assert kv.pool.num_used_blocks < 2 * -(-3500 // 16)


def test_prefix_hit_takes_only_the_window_in_a_sliding_group():
    """vLLM's find_longest_cache_hit: full attention left to right, then the sliding group right to left,
    needing cdiv(window - 1, block_size) contiguous cached blocks; blocks before the window come back as the
    null block and are neither taken nor counted."""
    kv = HybridKVCacheManager(64, 4, True, KVGroups((False, True), 8))
    prompt = list(range(100, 140))  # 10 full blocks
    a = _request(0, prompt)
    _step(kv, a, 40)
    _step(kv, a, 1)  # computed 40: 33 skipped -> the sliding group's blocks 0..7 freed (still cached)
    a_full, a_sliding = (list(t) for t in kv.tables(a))
    assert a_sliding[:8] == [NULL] * 8
    kv.free(a)
    b = _request(1, prompt + [1, 2, 3, 4])
    hits = kv.get_computed_blocks(b)
    assert len(hits) == 10  # (44 - 1) // 4 blocks: every full block of a's prompt
    assert hits.by_group[0] == a_full[:10]
    assert hits.by_group[1] == [NULL] * 8 + a_sliding[8:10]  # the last two cover the next token's window
    free_before = kv.pool.num_free_blocks
    assert kv.allocate_slots(b, 4, hits)
    sliding = kv.tables(b)[1]
    assert b.num_computed_tokens == 40 and sliding[:8] == [NULL] * 8
    # taken back from the free queue: 10 + 2 hit blocks, and one new block per group for tokens 40..43
    assert free_before - kv.pool.num_free_blocks == 12 + 2


def test_sliding_hit_needs_the_window_contiguous():
    """One group (every layer sliding), window 9: a hit needs cdiv(8, 4) = 2 contiguous cached blocks, found
    from the right; an evicted last block moves the hit left."""
    kv = HybridKVCacheManager(64, 4, True, KVGroups((True,), 9))
    prompt = list(range(200, 232))  # 8 full blocks
    a = _request(0, prompt)
    _step(kv, a, 32)
    a_blocks = list(a.block_ids)
    kv.free(a)  # tail first: block 7 is the first freed block in the queue
    assert len(kv.get_computed_blocks(_request(1, prompt + [5]))) == 8
    kv.pool.get_new_blocks(kv.pool.num_blocks - kv.pool.num_touched + 1)  # the never-used ones, then block 7
    hits = kv.get_computed_blocks(_request(2, prompt + [5]))
    assert list(hits) == [NULL] * 5 + a_blocks[5:7]  # 28 tokens: blocks 5 and 6 cover token 28's window


@pytest.mark.parametrize("model, groups, sliding", [("gpt-oss-20b", 2, 1), ("gemma-3-27b", 7, 6)])
def test_the_pool_is_vllms_num_blocks(model, groups, sliding):
    s = make_scenario(model=model, hardware={"gpu": "h200"}, engine={"max_model_len": 32768})
    facts = EngineFacts.of(s)
    g, mem = kv_groups(facts), memory_breakdown(facts)
    assert g.num_groups == groups and sum(g.sliding) == sliding and g.sliding[0]  # layer 0 is a sliding one
    pool = kv_pool_blocks(facts, mem)
    # vLLM logs "GPU KV cache size" as num_blocks // groups x block_size: memory.num_gpu_blocks
    assert pool // groups == mem.num_gpu_blocks
    override = make_scenario(model=model, hardware={"gpu": "h200"}, engine={"num_gpu_blocks_override": 7001})
    facts = EngineFacts.of(override)
    assert kv_pool_blocks(facts, memory_breakdown(facts)) == 7001
    assert memory_breakdown(EngineFacts.of(override)).num_gpu_blocks == 7001 // groups
    # the baselines keep every layer's context: the plain manager over memory.num_gpu_blocks
    static = make_scenario(model=model, hardware={"gpu": "h200"}, engine={"scheduler": "static"})
    facts = EngineFacts.of(static)
    assert kv_groups(facts) is None and kv_pool_blocks(facts, memory_breakdown(facts)) == mem.num_gpu_blocks


def _gpt_oss(**engine) -> object:
    return make_scenario(
        model="gpt-oss-20b",
        hardware={"gpu": "h200"},
        engine={"max_num_seqs": 32, "max_num_batched_tokens": 1024, "max_model_len": 4096} | engine,
        workload={
            "num_requests": 60,
            "seed": 1,
            "arrival": {"process": "poisson", "rate": 200.0},
            "prompt_tokens": {"dist": "uniform", "low": 200, "high": 2000},
            "output_tokens": {"dist": "uniform", "low": 50, "high": 400},
            "shared_prefix": {"tokens": 512, "group_size": 8},
        },
    )


def test_a_sliding_window_model_fits_more_requests_than_full_attention_would(monkeypatch):
    """The same pool, charged as vLLM's hybrid allocator charges it, preempts less and batches more than
    charging the sliding group for the whole context (what the simulator did before)."""
    scenario = _gpt_oss(num_gpu_blocks_override=1200)  # 600 blocks of 16 tokens per group: tight
    hybrid = simulate(scenario)
    assert isinstance(build_scheduler(EngineFacts.of(scenario), 1200, hybrid.recorder).kv, HybridKVCacheManager)
    steps = hybrid.recorder.steps.view()
    assert steps["kv_blocks_used"].max() <= 1199
    # before: the plain manager, each of 600 blocks holding both groups' slots, charged for every token
    monkeypatch.setattr("sim.scheduler.kv_groups", lambda facts: None)
    monkeypatch.setattr("sim.simulation.kv_pool_blocks", lambda facts, mem: mem.num_gpu_blocks)
    full_only = simulate(scenario)
    assert hybrid.recorder.num_preemptions < full_only.recorder.num_preemptions or (
        steps["num_running"].mean() > full_only.recorder.steps.view()["num_running"].mean()
    )


def test_fast_paths_off_give_the_reference_run():
    scenario = _gpt_oss(num_gpu_blocks_override=1200, enable_prefix_caching=True)
    run = simulate(scenario)
    assert run.recorder.num_preemptions > 0
    assert_same_run(run, simulate(scenario, fast_forward=False), scenario)


def test_a_request_of_max_model_len_must_fit_as_the_hybrid_allocator_holds_it():
    """Gemma-3-27B on one H100: 1,813 blocks of every group's slots (29,008 tokens were every layer to keep
    every token); a 32K request fits, since 6 of its 7 groups hold only the window."""
    from sim.memory_fit import fit_problems

    def problems(max_model_len: int, utilization: float = 0.9) -> list[str]:
        engine = {"max_model_len": max_model_len, "gpu_memory_utilization": utilization}
        s = make_scenario(model="gemma-3-27b", hardware={"gpu": "h100-sxm"}, engine=engine)
        facts = EngineFacts.of(s)
        return fit_problems(facts, memory_breakdown(facts))

    assert problems(32768) == [] and problems(131072) == []  # 8,192 + 6 x 193 blocks < 7 x 2,331
    (message,) = problems(131072, 0.7)
    assert "sliding-window group(s)" in message
    longest = int(message.split("engine.max_model_len <= ")[1].split(",")[0])
    assert problems(longest, 0.7) == [] and problems(longest + 16, 0.7) != []


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    groups=st.sampled_from([(True,), (True, False), (False, True, True, True)]),
    window=st.integers(1, 40),
    block_size=st.sampled_from([2, 4, 16]),
    extra_blocks=st.integers(0, 150),
    caching=st.booleans(),
    chunked=st.booleans(),
    seed=st.integers(0, 10**6),
)
def test_block_tables_and_ref_counts_stay_consistent(groups, window, block_size, extra_blocks, caching, chunked, seed):
    """Random requests (shared prefixes, live-style token ids) through the scheduler: at every step each block
    a table holds has that many references, a full group holds no null block, a sliding group none inside
    the window, and the pool is whole again at the end."""
    import random

    from sim.metrics import Recorder

    rng = random.Random(seed)
    num_blocks = len(groups) * -(-120 // block_size) + 1 + extra_blocks  # the longest request fits (119 tokens)
    engine = {"block_size": block_size, "max_num_batched_tokens": 64 if chunked else 256, "max_num_seqs": 8, "max_model_len": 256,
              "enable_prefix_caching": caching, "enable_chunked_prefill": chunked}  # fmt: skip
    scheduler = build_scheduler(
        EngineFacts.of(make_scenario(engine=engine)), num_blocks, Recorder(num_blocks, block_size, False)
    )
    kv = HybridKVCacheManager(num_blocks, block_size, caching, KVGroups(groups, window))
    scheduler.kv = kv
    scheduler.fast_decode_rows = False
    prefix = [rng.randrange(1000) for _ in range(40)]
    requests = []
    for i in range(12):
        prompt = prefix[: rng.randrange(0, 40)] + [rng.randrange(1000) for _ in range(rng.randrange(1, 60))]
        requests.append(Request(i, 0.0, len(prompt), rng.randrange(1, 20), prompt_token_ids=prompt))
        scheduler.add_request(requests[-1])
    for step in range(2000):
        if not scheduler.num_unfinished:
            break
        out = scheduler.schedule()
        refs: dict[int, int] = {}
        for request in scheduler.running:
            for g, blocks in enumerate(kv.tables(request)):
                skipped = kv.num_skipped_tokens(g, request.num_computed_tokens) // block_size
                assert NULL not in blocks[skipped:] or groups[g] and request.num_computed_tokens == 0
                for b in blocks:
                    if b != NULL:
                        refs[b] = refs.get(b, 0) + 1
        assert all(kv.pool.ref_cnt[b] == n for b, n in refs.items())
        assert kv.pool.num_used_blocks == len(refs)
        scheduler.update(out, float(step), {r.request_id: rng.randrange(1000) for r, _ in out.scheduled})
    assert all(r.is_finished for r in requests) and kv.pool.num_used_blocks == 0


def test_the_override_is_checked_as_the_pool_it_sets():
    from sim.memory_fit import fit_problems

    def problems(override: int) -> list[str]:
        s = _gpt_oss(num_gpu_blocks_override=override)
        facts = EngineFacts.of(s)
        return fit_problems(facts, memory_breakdown(facts))

    # a 4,096-token request: 256 blocks in the full group, the window's 73 in the sliding one
    (message,) = problems(329)
    assert "needs 329" in message and "at least 330" in message
    assert problems(330) == []


def test_slots_hold_every_groups_tokens_and_a_sliding_group_only_its_windows_blocks():
    kv = HybridKVCacheManager(32, 4, False, KVGroups((False, True), 5))
    # a step from 10 to 11 tokens: the full group holds all 11; the sliding group skips 10 - 5 + 1 = 6 tokens, one
    # whole block of 4, and holds the other 7
    assert kv.tokens_in_slots(10, 11) == 11 + 7
    assert kv.tokens_in_slots(0, 3) == 3 + 3


def test_the_share_of_allocated_slots_holding_tokens_is_a_share():
    # The requests' contexts once counted against every group's slots, a sliding group holding only its window's
    # blocks: 198% of slots "held tokens" for a model whose every layer slides, 17% for Gemma-3's seven groups.
    from sim.metrics import summarize

    scenario = _gpt_oss(num_gpu_blocks_override=1200)
    utilization = summarize(simulate(scenario).recorder, scenario.slo)["kv_slot_utilization"]
    assert 0.5 < utilization <= 1.0


def test_admission_asks_a_sliding_group_only_for_what_it_holds_at_once():
    # vLLM's admission check (full_sequence_must_fit) caps a sliding group's requirement at
    # max_admission_blocks_per_request: a 100-token prompt (25 blocks of 4) in a pool with 19 free blocks is
    # admitted when its only group slides over 8 tokens (at most 7 blocks held), not when it is full attention.
    prompt = list(range(100))
    sliding = HybridKVCacheManager(20, 4, False, KVGroups((True,), 8), admission_cap_blocks=7)
    full_and_sliding = HybridKVCacheManager(20, 4, False, KVGroups((False, True), 8), admission_cap_blocks=7)
    assert sliding.pool.num_free_blocks == 19
    assert sliding.full_sequence_fits(_request(0, prompt))
    assert not full_and_sliding.full_sequence_fits(_request(0, prompt))


def test_the_admission_cap_is_the_pool_sizers_figure():
    # gpt-oss-20b's window of 128 tokens, a 1,024-token budget, blocks of 16: ceil((128 - 1 + 1024) / 16) + 1 = 73
    scenario = _gpt_oss()
    kv = build_scheduler(EngineFacts.of(scenario), 1200, simulate(scenario).recorder).kv
    assert kv.admission_cap_blocks == 73
