"""Triton paged attention against the torch reference (itself checked in test_reference.py)."""

import math

import pytest

torch = pytest.importorskip("torch")
from helpers.kernels import DEVICE, FULL, free_blocks_before_window, make_case, require_triton

require_triton()
from gpu_engine.compile_launches import LAUNCH_CONFIG_SWEEP
from planner_kernels.paged_attention import _launch, compile_split_path, paged_attention
from planner_kernels.paged_attention_config import (
    DECODE_CONFIG,
    MAX_SPLITS,
    PREFILL_CONFIG,
    LaunchConfig,
    choose_num_splits,
    launch_config,
)
from planner_kernels.reference import paged_attention_ref

TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 2e-2}
HEAD_DIM = 128 if FULL else 16
LONG = 4097 if FULL else 300

DECODE = [(1, 1), (1, 15), (1, 16), (1, 17), (1, LONG)]
# full prefill, chunks over a cached prefix (odd sizes, crossing blocks), and decodes in one launch
MIXED = [(1, 33), (7, 7), (5, 40), (16, 17), (1, 1), (3, LONG)]


def check(case, dtype, **kwargs):
    scale = 1 / math.sqrt(case.query.shape[-1])
    out = paged_attention(*case.args(scale), **kwargs)
    expect = paged_attention_ref(*case.args(scale))
    assert out.dtype == dtype and out.shape == case.query.shape
    torch.testing.assert_close(out, expect, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("lens", [DECODE, MIXED], ids=["decode", "mixed"])
def test_dtypes(dtype, lens):
    check(make_case(lens, 8, 2, HEAD_DIM, 16, dtype, DEVICE), dtype)


@pytest.mark.parametrize("sliding_window", [1, 7, 16, 40])
@pytest.mark.parametrize("lens", [DECODE, MIXED], ids=["decode", "mixed"])
def test_sliding_window(sliding_window, lens):
    """Keys older than the window are masked, and the blocks wholly before it (NaN here, the null block in
    the engine) are skipped: the KV loop starts at the first tile inside the window."""
    dtype = torch.float16
    case = free_blocks_before_window(make_case(lens, 8, 2, HEAD_DIM, 16, dtype, DEVICE), sliding_window)
    scale = 1 / math.sqrt(HEAD_DIM)
    out = paged_attention(*case.args(scale), sliding_window=sliding_window)
    expect = paged_attention_ref(*case.args(scale), sliding_window=sliding_window)
    torch.testing.assert_close(out, expect, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("num_splits", [2, 5])
def test_sliding_window_split_context_path(num_splits):
    # the splits share out the tiles from the window's first on; one with none left sees nothing (no weight)
    dtype, window = torch.bfloat16, 24
    case = free_blocks_before_window(make_case(DECODE, 8, 2, HEAD_DIM, 16, dtype, DEVICE), window)
    scale = 1 / math.sqrt(HEAD_DIM)
    out = _launch(*case.args(scale), num_splits=num_splits, config=LaunchConfig(16, 16, 4, 1), sliding_window=window)
    expect = paged_attention_ref(*case.args(scale), sliding_window=window)
    torch.testing.assert_close(out, expect, atol=TOL[dtype], rtol=TOL[dtype])


def test_negative_sliding_window_is_refused():
    case = make_case([(1, 5)], 4, 2, HEAD_DIM, 16, torch.float16, DEVICE)
    with pytest.raises(ValueError, match="sliding_window=-1"):
        paged_attention(*case.args(1.0), sliding_window=-1)


@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (8, 2), (16, 2)])
@pytest.mark.parametrize("block_size", [8, 32])
def test_gqa_and_block_sizes(num_heads, num_kv_heads, block_size):
    check(make_case(MIXED, num_heads, num_kv_heads, HEAD_DIM, block_size, torch.float16, DEVICE), torch.float16)


@pytest.mark.parametrize("head_dim", [64, 40])  # 40: not a power of two, padded to 64 and masked
def test_head_dims(head_dim):
    check(make_case([(1, 20), (6, 30)], 4, 2, head_dim, 16, torch.float16, DEVICE), torch.float16)


@pytest.mark.parametrize("num_splits", [2, 5, MAX_SPLITS])
@pytest.mark.parametrize("lens", [DECODE, MIXED], ids=["decode", "mixed"])
def test_split_context_path(num_splits, lens):
    # the flash-decoding path that CUDA picks for small decode batches, forced here; 5 splits leave
    # some splits of short sequences empty, which the merge must ignore
    case = make_case(lens, 8, 2, HEAD_DIM, 16, torch.bfloat16, DEVICE)
    scale = 1 / math.sqrt(HEAD_DIM)
    out = _launch(*case.args(scale), num_splits=num_splits, config=LaunchConfig(16, 16, 4, 1))
    torch.testing.assert_close(out, paged_attention_ref(*case.args(scale)), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("block_m,tile_n,num_warps", LAUNCH_CONFIG_SWEEP)
def test_launch_configs(block_m, tile_n, num_warps):
    # the prefill config's larger BLOCK_M: several query blocks per sequence, partial last blocks
    case = make_case(MIXED, 8, 2, HEAD_DIM, 16, torch.float16, DEVICE)
    scale = 1 / math.sqrt(HEAD_DIM)
    out = _launch(*case.args(scale), num_splits=1, config=LaunchConfig(block_m, tile_n, num_warps, 2))
    torch.testing.assert_close(out, paged_attention_ref(*case.args(scale)), atol=2e-3, rtol=2e-3)


def test_num_splits_bounds():
    case = make_case(DECODE, 8, 2, HEAD_DIM, 16, torch.float16, DEVICE)
    with pytest.raises(ValueError, match="num_splits"):
        _launch(*case.args(1.0), num_splits=MAX_SPLITS + 1, config=LaunchConfig(16, 16, 4, 1))


def test_max_query_len_hint_does_not_change_result():
    case = make_case(DECODE, 8, 2, HEAD_DIM, 16, torch.float16, DEVICE)
    check(case, torch.float16, max_query_len=1)


def test_large_num_blocks_index_overflow():
    """Used blocks sit past 2^31 / stride elements, so block_id * stride overflows int32.

    The cache is a real 2^31+-element tensor (4 GiB fp16) that is never touched except the few
    blocks in use: torch.empty does not commit pages on CPU, the interpreter reads real addresses.
    """
    block_size, num_kv_heads, head_dim = 8, 1, 16
    stride = block_size * num_kv_heads * head_dim
    first_block = 2**31 // stride + 3
    torch.utils.deterministic.fill_uninitialized_memory = False  # NaN-filling would touch 4 GiB
    try:
        k_cache = torch.empty(first_block + 64, block_size, num_kv_heads, head_dim, dtype=torch.float16, device=DEVICE)
        v_cache = torch.empty_like(k_cache)
    except RuntimeError as err:
        pytest.skip(f"cannot reserve a 4 GiB cache: {err}")
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
    lens = [(1, 17), (4, 20)]
    case = make_case(lens, 4, 1, head_dim, block_size, torch.float16, DEVICE, first_block=first_block,
                     k_cache=k_cache, v_cache=v_cache)  # fmt: skip
    assert case.block_tables.max() * stride > 2**31
    check(case, torch.float16)


def test_rejects_bad_inputs():
    case = make_case([(1, 5)], 6, 4, 16, 8, torch.float16, DEVICE)
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(*case.args(1.0))
    case = make_case([(1, 5)], 4, 2, 16, 8, torch.float16, DEVICE)
    with pytest.raises(ValueError, match="block_tables"):
        paged_attention(case.query, case.k_cache, case.v_cache, case.block_tables.float(), case.seq_lens,
                        case.query_start_loc, 1.0)  # fmt: skip
    with pytest.raises(TypeError, match="dtypes differ"):
        paged_attention(case.query.float(), *case.args(1.0)[1:])


def test_compile_split_path_leaves_the_cache_alone():
    k_cache, v_cache = torch.randn(2, 4, 16, 2, HEAD_DIM, device=DEVICE).bfloat16()
    before = k_cache.clone(), v_cache.clone()
    compile_split_path(8, k_cache, v_cache)
    assert torch.equal(k_cache, before[0]) and torch.equal(v_cache, before[1])


@pytest.mark.parametrize(
    "num_programs,max_tiles,num_sms,expect",
    [
        (8, 5, 132, 5),  # batch-1 Llama-3.1-8B decode, 300 tokens in 64-token tiles: one split per tile
        (8, 64, 132, 16),  # 4k tokens: SMs / programs = 17, capped at MAX_SPLITS
        (8, 2, 132, 2),  # two tiles are enough to split
        (8, 1, 132, 1),  # one tile: nothing to split
        (64, 64, 132, 3),  # 8 sequences: ceil(132 / 64)
        (131, 64, 132, 2),
        (132, 64, 132, 1),  # as many programs as SMs: no split
        (512, 64, 132, 1),  # 64 sequences x 8 KV heads (the kernel sweep's shape on an H200)
        (8, 64, 108, 14),  # A100
    ],
)
def test_choose_num_splits(num_programs, max_tiles, num_sms, expect):
    assert choose_num_splits(num_programs, max_tiles, num_sms) == expect
    assert 1 <= expect <= MAX_SPLITS


def test_split_choice_fills_the_sms_whenever_a_context_spans_two_tiles():
    for num_sms in (108, 132):
        for num_programs in range(1, 2 * num_sms):
            for max_tiles in (1, 2, 3, 8, 1000):
                splits = choose_num_splits(num_programs, max_tiles, num_sms)
                if num_programs >= num_sms or max_tiles < 2:
                    assert splits == 1
                else:
                    assert 1 < splits <= min(max_tiles, MAX_SPLITS)
                    assert num_programs * splits >= num_sms or splits in (max_tiles, MAX_SPLITS)


def test_launch_configs_avoid_the_spilling_tiles():
    # gpu_engine.compile_check found spills with the plain prefill config (BLOCK_M 64, 4 warps) at these
    assert launch_config(False, torch.float32, 128, 90) == LaunchConfig(32, 64, 8, PREFILL_CONFIG.num_stages)
    assert launch_config(True, torch.bfloat16, 16, 90).tile_n == 32
    assert launch_config(False, torch.bfloat16, 256, 90).block_m == 32
    assert launch_config(True, torch.bfloat16, 256, 90).tile_n == 32
    assert launch_config(False, torch.bfloat16, 128, 80).num_warps == 8
    assert launch_config(False, torch.bfloat16, 256, 80).num_warps == 4
    assert launch_config(False, torch.bfloat16, 128, 90) == PREFILL_CONFIG  # the H100/H200 config stays
    assert launch_config(True, torch.bfloat16, 128, 80) == DECODE_CONFIG
