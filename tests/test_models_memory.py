"""The memory model for mixture-of-experts, quantised, sliding-window and latent-attention models.

Weights are checked against checkpoint sizes the model cards publish; KV per token against vLLM's page sizes
(`FullAttentionSpec` / `MLAAttentionSpec` / `SlidingWindowSpec` in vllm/v1/kv_cache_interface.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from planner.catalog import load_gpu_catalog, load_model_catalog
from planner.scenario.load import load_scenario
from sim.kv_sizing import kv_cache_groups
from sim.memory import GIB, forward_peak_bytes, memory_breakdown

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
MODELS = load_model_catalog()


def _scenario(model: str, gpu: str = "h100-sxm", **engine):
    """The Qwen3-30B-A3B scenario (validated, so engine defaults are vLLM's for an H100) with another model."""
    s = load_scenario(SCENARIOS / "h100_qwen3_30b_a3b.yaml")
    hardware = dataclasses.replace(s.hardware, gpu=load_gpu_catalog()[gpu])
    return dataclasses.replace(
        s, model=MODELS[model], hardware=hardware, engine=dataclasses.replace(s.engine, **engine)
    )


def test_qwen3_30b_a3b_on_one_h100() -> None:
    mem = memory_breakdown(load_scenario(SCENARIOS / "h100_qwen3_30b_a3b.yaml"))
    # every expert is stored: 30.5B (card) x 2 bytes, not the 3.3B active
    assert mem.weights_bytes == pytest.approx(30.5e9 * 2, rel=0.01)
    assert mem.kv_bytes_per_token == 48 * 2 * 4 * 128 * 2 == 98_304  # 48 layers, 4 KV heads of 128
    assert mem.num_gpu_blocks > 1000  # it fits, with room for a pool


def test_deepseek_v3_on_8_h200() -> None:
    mem = memory_breakdown(load_scenario(SCENARIOS / "h200x8_deepseek_v3_tp8.yaml"))
    # fp8 weights (1 byte + a float32 scale per 128x128 block); embeddings, lm_head, norms, routers in bf16:
    # 671B at 1 byte plus the two 0.93B bf16 tables' second byte = ~673 GB, an eighth per GPU, but for what vLLM
    # holds whole on every rank: the fused q_a + kv_a projections (61 x 7168 x (1536 + 576) fp8 weights, 0.92 GB)
    # and the routers (58 x 7168 x 256 in bf16, 0.21 GB); plus the bf16 copy of kv_b for the absorbed decode
    # (61 x 512 x 128 heads x (128 + 128) x 2 bytes, 2.05 GB, an eighth per rank).
    ds = MODELS["deepseek-v3"]
    replicated = 61 * 7168 * (1536 + 576) * (1 + 4 / 128**2) + 58 * 7168 * 256 * 2  # fp8 + its float32 scales
    assert replicated == pytest.approx(1.138e9, rel=0.01)
    copy = 61 * 512 * 128 * 256 * 2
    expected = (671e9 + 2 * ds.embedding_params - replicated + copy) / 8 + replicated
    assert mem.weights_bytes == pytest.approx(expected, rel=0.002)
    # MLA caches the latent (kv_lora_rank 512 + qk_rope_head_dim 64) per layer, replicated on every rank;
    # K and V of 128 heads of 192/128 would be 128x larger
    assert mem.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert mem.num_gpu_blocks > 10_000


def test_gpt_oss_checkpoint_sizes() -> None:
    # gpt-oss model card (OpenAI, Aug 2025), table 1: checkpoints of 12.8 GiB and 60.8 GiB (MXFP4 experts)
    for key, gib in [("gpt-oss-20b", 12.8), ("gpt-oss-120b", 60.8)]:
        mem = memory_breakdown(_scenario(key, gpu="h200"))
        assert mem.weights_bytes / GIB == pytest.approx(gib, rel=0.01), key


def test_awq_weights_are_a_quarter_plus_scales() -> None:
    awq = memory_breakdown(_scenario("qwen3-32b-awq")).weights_bytes
    bf16 = memory_breakdown(_scenario("qwen3-32b", gpu="h200")).weights_bytes
    m = MODELS["qwen3-32b"]
    linear = m.dense_linear_weights
    assert bf16 - awq == pytest.approx(linear * (2 - (4 + 20 / 128) / 8), rel=1e-6)
    assert 0.25 < awq / bf16 < 0.35


def test_hybrid_kv_groups_follow_vllm() -> None:
    # gpt-oss-20b: 12 sliding + 12 full layers -> 2 groups of 12; Gemma-3-27B: 52 sliding + 10 full ->
    # groups of 10 (1 full, 6 sliding, the last padded)
    assert kv_cache_groups(_scenario("gpt-oss-20b")) == (12, 2, 1)
    assert kv_cache_groups(_scenario("gemma-3-27b")) == (10, 7, 6)
    assert kv_cache_groups(_scenario("qwen3-30b-a3b")) == (48, 1, 0)
    s = _scenario("gpt-oss-20b", max_model_len=32768)
    mem = memory_breakdown(s)
    assert mem.kv_bytes_per_token == 24 * 2 * 8 * 64 * 2  # the pool unit: every layer's K and V
    # a request of max_model_len holds all its blocks in the full group, the window's in the sliding one
    full_blocks = 32768 // 16
    window_blocks = -(-(128 - 1 + s.engine.max_num_batched_tokens) // 16) + 1
    assert mem.sliding_window_blocks == window_blocks
    assert mem.max_concurrency_at_max_len == pytest.approx(
        mem.num_gpu_blocks * 2 / (full_blocks + window_blocks), rel=1e-9
    )
    assert mem.max_concurrency_at_max_len > 1.5 * mem.num_gpu_blocks / full_blocks  # the window saves memory


def test_moe_activation_peak_follows_fused_moe_workspaces() -> None:
    s = _scenario("qwen3-30b-a3b")
    m, t = s.model, 8192
    dense_formula = t * 2 * (2 * m.hidden_size + 3 * m.intermediate_size)
    workspace = t * 8 * (max(2 * 768, 2048) + 768) * 2
    expected = t * 2 * 3 * 2048 + workspace + t * 128 * 4
    assert forward_peak_bytes(s, t) == expected
    assert forward_peak_bytes(s, t) != dense_formula


def test_a_block_override_beyond_the_memory_left_cannot_run():
    """vLLM allocates the pool it is told to: 16M blocks on an A10 printed a 131,072 GiB pool, unwarned."""
    from sim.memory_fit import fit_problems

    s = load_scenario(SCENARIOS / "a10_qwen7b.yaml")
    fits = memory_breakdown(s).kv_cache_bytes // memory_breakdown(s).block_bytes
    at_most = dataclasses.replace(s, engine=dataclasses.replace(s.engine, num_gpu_blocks_override=fits))
    assert fit_problems(at_most, memory_breakdown(at_most)) == []
    beyond = dataclasses.replace(s, engine=dataclasses.replace(s.engine, num_gpu_blocks_override=fits + 1))
    (problem,) = fit_problems(beyond, memory_breakdown(beyond))
    assert problem.startswith(f"engine.num_gpu_blocks_override {fits + 1:,} x ")
    assert f"the engine would run out of memory allocating them; lower it to at most {fits:,}" in problem


def test_a_block_override_of_a_sliding_window_model_is_counted_in_layer_groups():
    """Gemma-3 in a contiguous cache: the override counts blocks of one of 7 layer groups, so its minimum is the
    request's blocks (and the null block) times 7; the message once said 36 blocks, and 'raise it to 257' of 257."""
    from sim.memory_fit import fit_problems

    base = _scenario("gemma-3-27b", max_model_len=4096, kv_cache="contiguous")
    groups = memory_breakdown(base).kv_cache_groups
    needed = (4096 // base.engine.block_size + 1) * groups

    def problems(override):
        s = dataclasses.replace(base, engine=dataclasses.replace(base.engine, num_gpu_blocks_override=override))
        return fit_problems(s, memory_breakdown(s))

    assert groups == 7 and problems(needed) == []
    (problem,) = problems(needed - 1)
    assert problem.startswith(f"engine.num_gpu_blocks_override {needed - 1:,} ({needed // groups - 1} blocks of all")
    assert f"raise it to at least {needed:,}" in problem


def test_the_fused_moe_workspace_stops_growing_at_vllms_chunk():
    # vLLM's fused MoE runs at most VLLM_FUSED_MOE_CHUNK_SIZE (16 * 1024 in current releases) tokens at once: a token
    # budget of 32,768 needs the workspace of 16,384 (the planner once assumed 32 * 1024: 1.77 GiB for 1.08).
    from sim.memory import forward_peak_bytes

    s = load_scenario(SCENARIOS / "h100_qwen3_30b_a3b.yaml")
    m = s.model
    per_token = 2 * 3 * m.hidden_size + m.num_experts * 4  # the residual, input, output and router logits only
    assert forward_peak_bytes(s, 32768) - forward_peak_bytes(s, 16384) == 16384 * per_token
    assert forward_peak_bytes(s, 16384) - forward_peak_bytes(s, 8192) > 8192 * per_token  # the workspace grows
