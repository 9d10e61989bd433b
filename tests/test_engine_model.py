"""The live engine's model against transformers': same weights (saved by HF, read by load_weights), same logits."""

import dataclasses

import pytest
import torch
import transformers

from gpu_engine.model import build_model
from gpu_engine.runner import allocate_kv_caches, build_batch
from gpu_engine.weights import load_weights
from planner.catalog import model_spec_from_hf_config
from sim.request import Request

TINY = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "max_position_embeddings": 256,
}
HF_CLASSES = {
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
}
CASES = {  # name -> (model_type, config overrides)
    "llama": ("llama", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True, "rope_theta": 500000.0}),
    "mistral": ("mistral", {"sliding_window": None}),
    "qwen2-tied": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"head_dim": 24}),  # head_dim != hidden / heads, as in the real Qwen3s
}


def tiny_hf(model_type: str, path, seed: int = 0, **overrides):
    """A random tiny HF model saved as safetensors in path; returns (hf_model, its ModelSpec)."""
    config_cls, model_cls = HF_CLASSES[model_type]
    config = config_cls(**TINY | overrides)
    torch.manual_seed(seed)
    hf = model_cls(config).eval()
    hf.save_pretrained(path)
    return hf, model_spec_from_hf_config(config.to_dict(), f"tiny-{model_type}")


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


def test_bf16_model_tracks_float32(tmp_path):
    _, spec = tiny_hf("qwen2", tmp_path, tie_word_embeddings=True)
    models = {dtype: build_model(spec, dtype, "cpu") for dtype in (torch.float32, torch.bfloat16)}
    for model in models.values():
        load_weights(model, tmp_path)
    assert models[torch.bfloat16].rope_cos_sin.dtype == torch.float32  # not rounded with the weights
    assert torch.get_default_dtype() == torch.float32  # build_model restored it

    prompt = list(range(100, 130))
    fp32 = prompt_logits(models[torch.float32], spec, prompt, [0, 1], block_size=16)
    bf16 = prompt_logits(models[torch.bfloat16], spec, prompt, [0, 1], block_size=16, dtype=torch.bfloat16)
    assert bf16.dtype == torch.bfloat16
    torch.testing.assert_close(bf16.float(), fp32, atol=0.02, rtol=0.05)
