"""The live engine's model against transformers': same weights (saved by HF, read by load_weights), same logits."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from helpers.engine import TINY, tiny_hf, transformers

import gpu_engine.attention
import planner_kernels.availability
from gpu_engine.model import build_model
from gpu_engine.runner import allocate_kv_caches, build_batch
from gpu_engine.weights import load_weights
from planner.catalog import CatalogError, model_spec_from_hf_config
from planner_kernels.availability import triton_available
from planner_kernels.reference import rope_inv_freq
from sim.request import Request

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 32,
}
CASES = {  # name -> (model_type, config overrides)
    "llama": ("llama", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True, "rope_theta": 500000.0}),
    "mistral": ("mistral", {"sliding_window": None}),
    "qwen2-tied": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"head_dim": 24}),  # head_dim != hidden / heads, as in the real Qwen3s
    # Llama-3.1's rescaled frequencies; original length 32 (8192 in Llama-3.1), so that at head_dim 16
    # the three bands (kept, interpolated, divided by factor) all occur
    "llama3-rope": ("llama", {"rope_theta": 500000.0, "rope_scaling": LLAMA3_ROPE}),
}


def prompt_logits(model, spec, prompt: list[int], block_ids: list[int], block_size: int, dtype=torch.float32):
    """Logits of every prompt position from one full-prompt forward through the paged cache."""
    request = Request(0, 0.0, len(prompt), 1, prompt_token_ids=prompt)
    request.block_ids = block_ids
    batch = build_batch([(request, len(prompt))], block_size, "cpu")
    attn = dataclasses.replace(batch.attn, logits_indices=torch.arange(len(prompt)))
    kv_caches = allocate_kv_caches(spec, max(block_ids) + 1, block_size, dtype, "cpu")
    with torch.inference_mode():
        return model(batch.input_ids, batch.positions, attn, kv_caches)


@pytest.mark.parametrize("case", CASES)
def test_prompt_logits_match_transformers(case, tmp_path):
    model_type, overrides = CASES[case]
    hf, spec = tiny_hf(model_type, tmp_path, **overrides)
    model = build_model(spec, torch.float32, "cpu")
    load_weights(model, tmp_path)
    prompt = torch.randint(0, spec.vocab_size, (21,), generator=torch.Generator().manual_seed(1)).tolist()

    ours = prompt_logits(model, spec, prompt, block_ids=[5, 2, 7, 0, 3, 6], block_size=4)  # scattered blocks
    with torch.no_grad():
        theirs = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("case", ["llama3-rope", "qwen3"])  # qwen3: q/k norm per head, head_dim 24
def test_prompt_logits_through_the_triton_kernels(case, tmp_path, monkeypatch):
    """Every kernel of the CUDA path (norms, rotary, silu_and_mul, store_kv, attention), run by Triton's
    CPU interpreter, against transformers."""
    if not triton_available():
        pytest.skip("needs triton and a CUDA device or TRITON_INTERPRET=1 (set by tests/conftest.py)")
    monkeypatch.setattr(gpu_engine.attention, "_triton_ops", lambda device_type: gpu_engine.attention.triton_ops())
    model_type, overrides = CASES[case]
    hf, spec = tiny_hf(model_type, tmp_path, **overrides)
    model = build_model(spec, torch.float32, "cpu")
    load_weights(model, tmp_path)
    prompt = torch.randint(0, spec.vocab_size, (21,), generator=torch.Generator().manual_seed(1)).tolist()

    ours = prompt_logits(model, spec, prompt, block_ids=[5, 2, 7, 0, 3, 6], block_size=4)
    with torch.no_grad():
        theirs = hf(torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


def test_logits_only_for_the_sampled_rows(tmp_path):
    _, spec = tiny_hf("llama", tmp_path)
    model = build_model(spec, torch.float32, "cpu")
    load_weights(model, tmp_path)
    prompt = list(range(10, 19))
    everything = prompt_logits(model, spec, prompt, [1, 0, 2], block_size=4)

    request = Request(0, 0.0, len(prompt), 1, prompt_token_ids=prompt)
    request.block_ids = [1, 0, 2]
    batch = build_batch([(request, len(prompt))], 4, "cpu")
    kv_caches = allocate_kv_caches(spec, 3, 4, torch.float32, "cpu")
    with torch.inference_mode():
        last = model(batch.input_ids, batch.positions, batch.attn, kv_caches)
    assert last.shape == (1, spec.vocab_size)
    torch.testing.assert_close(last[0], everything[-1])


def test_bf16_model_tracks_float32_and_transformers(tmp_path):
    hf, spec = tiny_hf("qwen2", tmp_path, tie_word_embeddings=True)
    models = {dtype: build_model(spec, dtype, "cpu") for dtype in (torch.float32, torch.bfloat16)}
    for model in models.values():
        load_weights(model, tmp_path)
    assert models[torch.bfloat16].cos_sin_cache.dtype == torch.bfloat16  # HF applies RoPE in the model dtype
    assert torch.get_default_dtype() == torch.float32  # build_model restored it

    prompt = list(range(100, 130))
    fp32 = prompt_logits(models[torch.float32], spec, prompt, [0, 1], block_size=16)
    bf16 = prompt_logits(models[torch.bfloat16], spec, prompt, [0, 1], block_size=16, dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.float(), fp32, atol=0.02, rtol=0.05)
    with torch.no_grad():
        theirs = hf.to(torch.bfloat16)(torch.tensor([prompt])).logits[0]
    # RMSNorm, RoPE and SwiGLU round as HF's; only attention differs (float32 here, bf16 SDPA there)
    torch.testing.assert_close(bf16, theirs, atol=0.02, rtol=0.05)


def test_llama3_inv_freq_equals_transformers():
    llama_config = transformers().LlamaConfig  # skips, saying why, when transformers cannot be imported
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = llama_config(**TINY, rope_theta=500000.0, rope_scaling=LLAMA3_ROPE)
    theirs, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    spec = model_spec_from_hf_config(config.to_dict(), "tiny-llama3")
    ours = rope_inv_freq(spec.head_dim, spec.rope_theta, spec.rope_scaling)
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, rope_inv_freq(spec.head_dim, spec.rope_theta))


def test_rope_scaling_spellings_and_unsupported_types():
    v4 = {"model_type": "llama", **TINY, "rope_theta": 500000.0, "rope_scaling": dict(LLAMA3_ROPE)}
    v4_old = v4 | {"rope_scaling": {"type": "llama3"} | {k: v for k, v in LLAMA3_ROPE.items() if k != "rope_type"}}
    v5 = {"model_type": "llama", **TINY, "rope_parameters": LLAMA3_ROPE | {"rope_theta": 500000.0}}
    specs = [model_spec_from_hf_config(c, "m") for c in (v4, v4_old, v5)]
    assert specs[0] == specs[1] == specs[2] and specs[0].rope_scaling["factor"] == 8.0
    unscaled = {"model_type": "llama", **TINY, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}
    assert model_spec_from_hf_config(unscaled, "m").rope_scaling is None
    with pytest.raises(
        CatalogError, match=r"rope_scaling type 'dynamic' is not supported \(supported: default, llama3"
    ):
        model_spec_from_hf_config(v4 | {"rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}, "m")
    # YaRN (gpt-oss, DeepSeek-V3) is read for sizes and costs; the live engine refuses to run it
    yarn = model_spec_from_hf_config(v4 | {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "m")
    assert yarn.live_engine_unsupported() == ["rope_scaling yarn"]
    with pytest.raises(ValueError, match="does not implement rope_scaling yarn"):
        build_model(yarn, torch.float32, "cpu")
    with pytest.raises(ValueError, match="lacks low_freq_factor"):
        model_spec_from_hf_config(v4 | {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "m")


def test_cuda_without_triton_warns_and_falls_back(monkeypatch):
    monkeypatch.setattr(planner_kernels.availability, "triton_available", lambda: False)
    with pytest.warns(RuntimeWarning, match="100x slower"):
        assert gpu_engine.attention._triton_ops.__wrapped__("cuda") is None  # uncached call
    assert gpu_engine.attention.kernel_ops("cpu") is gpu_engine.attention.TORCH_OPS
