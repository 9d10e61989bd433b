"""store_kv, rms_norm, rotary and silu_and_mul kernels against their torch references."""

import pytest

torch = pytest.importorskip("torch")
from helpers.kernels import DEVICE, FULL, require_triton

require_triton()
from planner_kernels.activation import silu_and_mul
from planner_kernels.reference import rms_norm_ref, rope_cos_sin_cache, rotary_ref, silu_and_mul_ref, store_kv_ref
from planner_kernels.rms_norm import rms_norm
from planner_kernels.rotary import rotary
from planner_kernels.store_kv import store_kv

# bf16 under the interpreter rounds fp32 -> bf16 differently from torch: one ulp apart
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}
HEAD_DIM = 128 if FULL else 16


def assert_same_cache(got, expect):
    """Equal bit for bit, NaN (never-written slots) included."""
    assert torch.equal(got.isnan(), expect.isnan())
    assert torch.equal(got.nan_to_num(0.0), expect.nan_to_num(0.0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_store_kv(dtype, slot_dtype):
    num_blocks, block_size, num_kv_heads = 16, 8, 3  # 3 heads: padded to 4 inside the kernel
    num_tokens = 40
    # strided key/value, as when split out of a fused qkv projection
    kv = torch.randn(num_tokens, 2 * num_kv_heads, HEAD_DIM, device=DEVICE).to(dtype)
    key, value = kv[:, :num_kv_heads], kv[:, num_kv_heads:]
    slots = torch.randperm(num_blocks * block_size, device=DEVICE)[:num_tokens]
    slots[::7] = -1  # padding tokens
    slots = slots.to(slot_dtype)
    caches = [torch.full((num_blocks, block_size, num_kv_heads, HEAD_DIM), float("nan"), dtype=dtype, device=DEVICE)
              for _ in range(4)]  # fmt: skip
    store_kv(key, value, caches[0], caches[1], slots)
    store_kv_ref(key, value, caches[2], caches[3], slots)
    assert_same_cache(caches[0], caches[2])
    assert_same_cache(caches[1], caches[3])


def test_store_kv_large_cache_index_overflow():
    """A slot whose block * stride is past 2^31 elements (4 GiB fp16 cache, only a few pages touched)."""
    block_size, head_dim = 8, 16
    first_block = 2**31 // (block_size * head_dim) + 3
    torch.utils.deterministic.fill_uninitialized_memory = False  # NaN-filling would touch 4 GiB
    try:
        k_cache = torch.empty(first_block + 4, block_size, 1, head_dim, dtype=torch.float16, device=DEVICE)
        v_cache = torch.empty_like(k_cache)
    except RuntimeError as err:
        pytest.skip(f"cannot reserve a 4 GiB cache: {err}")
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
    k_cache[first_block:] = float("nan")
    v_cache[first_block:] = float("nan")
    key, value = torch.randn(2, 2, 1, head_dim, device=DEVICE).half()
    store_kv(key, value, k_cache, v_cache, torch.tensor([first_block * block_size + 5, -1], device=DEVICE))
    assert torch.equal(k_cache[first_block, 5, 0], key[0, 0])
    assert torch.equal(v_cache[first_block, 5, 0], value[0, 0])
    assert k_cache[first_block:].isnan().sum() == k_cache[first_block:].numel() - head_dim


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("with_residual", [False, True])
def test_rms_norm(dtype, with_residual):
    hidden = 4096 if FULL else 200  # not a power of two: masked tail
    x = torch.randn(7, hidden, device=DEVICE).to(dtype)
    weight = torch.randn(hidden, device=DEVICE).to(dtype)
    residual = torch.randn(7, hidden, device=DEVICE).to(dtype) if with_residual else None
    got, expect = rms_norm(x, weight, 1e-6, residual), rms_norm_ref(x, weight, 1e-6, residual)
    if not with_residual:
        got, expect = (got,), (expect,)
    for g, e in zip(got, expect):
        assert g.dtype == dtype
        torch.testing.assert_close(g, e, atol=TOL[dtype], rtol=TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rot_dim", [HEAD_DIM, HEAD_DIM // 2])  # HEAD_DIM // 2: partial rotary
def test_rotary_in_place(dtype, rot_dim):
    num_tokens, num_heads, num_kv_heads = 6, 6, 2
    positions = torch.tensor([0, 1, 17, 500, 4095, 30000], device=DEVICE)
    cache = rope_cos_sin_cache(rot_dim, 30001, 500000.0, dtype=dtype).to(DEVICE)
    qkv = torch.randn(num_tokens, num_heads + 2 * num_kv_heads, HEAD_DIM, device=DEVICE).to(dtype)
    expect = qkv.clone()
    q, k = qkv[:, :num_heads], qkv[:, num_heads : num_heads + num_kv_heads]  # strided views
    rotary_ref(positions, expect[:, :num_heads], expect[:, num_heads : num_heads + num_kv_heads], cache)
    q_out, k_out = rotary(positions, q, k, cache)
    assert q_out.data_ptr() == q.data_ptr() and k_out.data_ptr() == k.data_ptr()
    torch.testing.assert_close(qkv, expect, atol=TOL[dtype], rtol=TOL[dtype])  # v and the unrotated tail too


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("d", [HEAD_DIM * 4, 1500])  # 1500: two column blocks, the second masked
def test_silu_and_mul(dtype, d):
    x = (3 * torch.randn(5, 2 * d, device=DEVICE)).to(dtype)
    got = silu_and_mul(x)
    assert got.dtype == dtype and got.shape == (5, d)
    torch.testing.assert_close(got, silu_and_mul_ref(x), atol=TOL[dtype], rtol=TOL[dtype])
