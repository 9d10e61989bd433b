"""The torch references against naive float64 math, so the kernels' oracle is itself checked."""

import math

import pytest

torch = pytest.importorskip("torch")
from helpers.kernels import DEVICE, dense_attention, free_blocks_before_window, make_case

from planner_kernels.reference import paged_attention_ref, rms_norm_ref, rope_cos_sin_cache, rotary_ref, store_kv_ref

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("num_heads,num_kv_heads", [(4, 4), (8, 2)])
@pytest.mark.parametrize("block_size", [8, 16])
def test_paged_attention_ref_matches_dense(dtype, num_heads, num_kv_heads, block_size):
    # decode, full prefill, prefill chunk over a cached prefix, and block-boundary lengths
    lens = [(1, 1), (1, 17), (16, 16), (5, 40), (3, 15), (1, 300)]
    case = make_case(lens, num_heads, num_kv_heads, 32, block_size, dtype, DEVICE)
    scale = 1 / math.sqrt(32)
    out = paged_attention_ref(*case.args(scale))
    assert out.dtype == dtype and out.shape == case.query.shape
    torch.testing.assert_close(out.double(), dense_attention(case, scale), atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("sliding_window", [1, 5, 16, 33])
def test_paged_attention_ref_sliding_window_matches_dense(sliding_window):
    # windows shorter than, across and longer than a block; the blocks before a window hold NaN
    lens = [(1, 1), (1, 17), (16, 16), (5, 40), (3, 15), (1, 300), (12, 70)]
    case = free_blocks_before_window(make_case(lens, 8, 2, 32, 8, torch.float32, DEVICE), sliding_window)
    scale = 1 / math.sqrt(32)
    out = paged_attention_ref(*case.args(scale), sliding_window=sliding_window)
    expect = dense_attention(case, scale, sliding_window)
    torch.testing.assert_close(out.double(), expect, atol=TOL[torch.float32], rtol=TOL[torch.float32])
    assert not torch.allclose(expect, dense_attention(case, scale), atol=1e-3)  # the window matters here


def test_store_kv_ref_matches_loop():
    key, value = torch.randn(6, 2, 16), torch.randn(6, 2, 16)
    slots = torch.tensor([5, -1, 0, 31, -1, 12], dtype=torch.int32)
    k_cache = torch.full((4, 8, 2, 16), float("nan"))
    v_cache = torch.full((4, 8, 2, 16), float("nan"))
    store_kv_ref(key, value, k_cache, v_cache, slots)
    expect_k, expect_v = torch.full_like(k_cache, float("nan")), torch.full_like(v_cache, float("nan"))
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            expect_k[s // 8, s % 8], expect_v[s // 8, s % 8] = key[t], value[t]
    assert torch.equal(k_cache.nan_to_num(7.0), expect_k.nan_to_num(7.0))
    assert torch.equal(v_cache.nan_to_num(7.0), expect_v.nan_to_num(7.0))


def test_rms_norm_ref_rounds_as_hf():
    # bf16: normalised in float32, rounded, then multiplied by the bf16 weight (LlamaRMSNorm's order)
    x, weight = torch.randn(3, 40).bfloat16(), torch.randn(40).bfloat16()
    xf = x.float()
    expect = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16()
    assert torch.equal(rms_norm_ref(x, weight, 1e-6), expect)


def test_rms_norm_ref_matches_formula():
    x, residual, weight = torch.randn(3, 40), torch.randn(3, 40), torch.randn(40)
    expect = lambda h: h.double() / h.double().pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * weight.double()
    torch.testing.assert_close(rms_norm_ref(x, weight, 1e-6).double(), expect(x), atol=1e-5, rtol=1e-5)
    normed, new_residual = rms_norm_ref(x, weight, 1e-6, residual)
    torch.testing.assert_close(new_residual, x + residual)
    torch.testing.assert_close(normed.double(), expect(x + residual), atol=1e-5, rtol=1e-5)


def test_rotary_ref_matches_complex_rotation():
    # neox style pairs feature i with i + head_dim/2 and rotates the pair by position * theta^(-2i/d)
    positions = torch.tensor([0, 1, 7, 1000])
    q, k = torch.randn(4, 3, 16, dtype=torch.float64), torch.randn(4, 1, 16, dtype=torch.float64)
    q_rot, k_rot = rotary_ref(positions, q.float(), k.float(), rope_cos_sin_cache(16, 1001, 10000.0))
    angles = positions[:, None, None].double() * 10000.0 ** (-torch.arange(0, 16, 2).double() / 16)
    for x, x_rot in ((q, q_rot), (k, k_rot)):
        z = torch.complex(x[..., :8], x[..., 8:]) * torch.polar(torch.ones_like(angles), angles)
        torch.testing.assert_close(x_rot.double(), torch.cat((z.real, z.imag), dim=-1), atol=1e-4, rtol=1e-4)
