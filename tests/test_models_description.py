"""Mixture-of-experts, sliding-window, latent-attention and quantised models read from HF config.json.

Their parameter counts are checked exactly against transformers' own models built from the same catalog
entries (on the meta device: no memory), and against the model cards (1%), by tests/test_catalog.py.
"""

from __future__ import annotations

import json

import pytest
import yaml

from planner.catalog import CatalogError, load_model_catalog, load_model_config_path, model_spec_from_hf_config

MODELS = load_model_catalog()
NEW_MODELS = [
    "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b", "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b",
    "deepseek-v3", "llama-3.3-70b", "qwen3-32b-awq", "deepseek-v2-lite",
]  # fmt: skip


def _raw_catalog() -> dict:
    from importlib import resources

    return yaml.safe_load(resources.files("planner.catalog").joinpath("models.yaml").read_text())


def test_moe_fields() -> None:
    qwen = MODELS["qwen3-30b-a3b"]
    assert (qwen.num_experts, qwen.num_experts_per_tok, qwen.moe_intermediate_size) == (128, 8, 768)
    assert qwen.num_moe_layers == 48 and qwen.dense_layers == () and qwen.shared_expert_intermediate_size == 0
    assert qwen.active_params == pytest.approx(3.3e9, rel=0.02)  # card: "3.3B activated"
    assert MODELS["qwen3-235b-a22b"].active_params == pytest.approx(22e9, rel=0.02)  # card: "22B activated"
    mixtral = MODELS["mixtral-8x7b"]
    assert (mixtral.num_experts, mixtral.num_experts_per_tok, mixtral.moe_intermediate_size) == (8, 2, 14336)
    assert mixtral.active_params == pytest.approx(12.9e9, rel=0.01)  # Mixtral paper: 12.9B active
    ds = MODELS["deepseek-v3"]
    assert ds.dense_layers == (0, 1, 2) and ds.num_moe_layers == 58
    assert ds.shared_expert_intermediate_size == 2048 and ds.num_experts == 256
    assert ds.active_params == pytest.approx(37e9, rel=0.02)  # card: "37B activated"
    gpt = MODELS["gpt-oss-120b"]
    # OpenAI's model card counts 5.13B active without the embedding table (the input lookup reads one row)
    assert gpt.active_params - gpt.embedding_params == pytest.approx(5.13e9, rel=0.01)
    assert gpt.expert_bias and gpt.attention_bias


def test_dense_vs_moe_layers() -> None:
    base = {
        "model_type": "qwen3_moe", "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
        "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 6, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 512,
    }  # fmt: skip
    assert model_spec_from_hf_config({**base, "decoder_sparse_step": 2}, "x").dense_layers == (0, 2, 4)
    assert model_spec_from_hf_config({**base, "mlp_only_layers": [0, 5]}, "x").dense_layers == (0, 5)
    ds = {**base, "model_type": "deepseek_v3", "n_routed_experts": 8, "first_k_dense_replace": 2,
          "n_shared_experts": 2, "kv_lora_rank": 16, "q_lora_rank": None, "qk_rope_head_dim": 8,
          "qk_nope_head_dim": 16, "v_head_dim": 16}  # fmt: skip
    del ds["num_experts"]
    spec = model_spec_from_hf_config(ds, "x")
    assert spec.dense_layers == (0, 1) and spec.shared_expert_intermediate_size == 64
    assert spec.q_lora_rank == 0 and spec.head_dim == 24  # q heads are qk_nope + qk_rope wide


def test_sliding_window_layers() -> None:
    gpt = MODELS["gpt-oss-20b"]
    assert gpt.sliding_window == 128 and gpt.sliding_layers == tuple(range(0, 24, 2))
    gemma = MODELS["gemma-3-27b"]
    assert gemma.sliding_window == 1024 and gemma.num_sliding_layers == 52  # every 6th of 62 is global
    assert 5 not in gemma.sliding_layers and 4 in gemma.sliding_layers
    assert gemma.qk_norm and gemma.post_norms and gemma.tie_word_embeddings
    mistral_v01 = {
        "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
        "max_position_embeddings": 32768, "sliding_window": 4096,
    }  # fmt: skip
    spec = model_spec_from_hf_config(mistral_v01, "mistral-7b-v0.1")
    assert spec.sliding_window == 4096 and spec.num_sliding_layers == 32  # every layer, not ignored
    assert spec.live_engine_unsupported() == []  # the torch path runs it (tests/test_models_engine_parity.py)
    assert MODELS["mixtral-8x7b"].sliding_window is None and MODELS["qwen3-30b-a3b"].num_sliding_layers == 0


def test_mla_and_quantization_fields() -> None:
    ds = MODELS["deepseek-v3"]
    assert (ds.q_lora_rank, ds.kv_lora_rank, ds.qk_rope_head_dim, ds.qk_nope_head_dim, ds.v_head_dim) == (
        1536, 512, 64, 128, 128,
    )  # fmt: skip
    assert ds.quant_method == "fp8" and ds.quant_group_size == 128 * 128
    assert ds.quantized_bits_per_weight == pytest.approx(8 + 32 / 16384)  # a float32 scale per 128x128 block
    awq = MODELS["qwen3-32b-awq"]
    assert (awq.quant_method, awq.weight_bits, awq.quant_group_size) == ("awq", 4, 128)
    assert awq.quantized_bits_per_weight == pytest.approx(4 + 20 / 128)  # fp16 scale + 4-bit zero per group
    gpt = MODELS["gpt-oss-20b"]
    assert gpt.quant_method == "mxfp4" and gpt.experts_only_quantized and gpt.quantized_bits_per_weight == 4.25
    gptq = model_spec_from_hf_config(
        {**_raw_catalog()["qwen3-32b"], "quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": -1}},
        "g",
    )
    assert gptq.quantized_bits_per_weight == 8  # per-channel scales: negligible


QWEN3_MOE_CONFIG = {  # the shape of Qwen/Qwen3-30B-A3B's config.json (token ids and dropout left out)
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
    "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True, "output_router_logits": False,
    "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "vocab_size": 151936, "max_position_embeddings": 40960, "max_window_layers": 48, "sliding_window": None,
    "use_sliding_window": False, "tie_word_embeddings": False, "attention_bias": False, "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-06, "rope_scaling": None, "torch_dtype": "bfloat16", "hidden_act": "silu",
}  # fmt: skip


def test_local_folder_reads_the_same_as_the_catalog(tmp_path) -> None:
    folder = tmp_path / "Qwen3-30B-A3B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN3_MOE_CONFIG))
    spec = load_model_config_path(folder)
    catalog = MODELS["qwen3-30b-a3b"]
    assert spec.num_params == catalog.num_params and spec.active_params == catalog.active_params
    assert spec.dense_layers == catalog.dense_layers == ()


def test_gemma3_multimodal_config_reads_text_config() -> None:
    # google/gemma-3-27b-it's config.json keeps the language model in text_config, with only non-default keys
    config = {
        "model_type": "gemma3",
        "text_config": {
            "model_type": "gemma3_text", "hidden_size": 5376, "intermediate_size": 21504, "num_hidden_layers": 62,
            "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "query_pre_attn_scalar": 168,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
        },
        "vision_config": {"model_type": "siglip_vision_model"},
    }  # fmt: skip
    spec = model_spec_from_hf_config(config, "gemma")
    assert spec.num_params == MODELS["gemma-3-27b"].num_params
    assert spec.sliding_layers == MODELS["gemma-3-27b"].sliding_layers


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quant_method = 'bitsandbytes'"),
        ({"quantization_config": {"quant_method": "awq", "bits": 5}}, "bits = 5"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"num_experts_per_tok": 200}, "exceeds the 128 experts"),
        ({"mlp_only_layers": [99]}, "mlp_only_layers"),
        ({"num_experts": None}, "num_experts"),
        ({"hidden_act": "gelu"}, "hidden_act"),
    ],
)
def test_unsupported_moe_fields_are_named(change: dict, message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        model_spec_from_hf_config({**QWEN3_MOE_CONFIG, **change}, "x")


def test_no_silent_dense_reading() -> None:
    llama = {k: v for k, v in _raw_catalog()["llama-3.1-8b"].items() if k != "published_params"}
    with pytest.raises(CatalogError, match="num_local_experts = 8 but model_type 'llama' is dense"):
        model_spec_from_hf_config({**llama, "num_local_experts": 8}, "x")
    with pytest.raises(CatalogError, match="kv_lora_rank"):
        model_spec_from_hf_config({**llama, "kv_lora_rank": 512}, "x")
    with pytest.raises(CatalogError, match="sliding_window = 4096 without layer_types"):
        model_spec_from_hf_config({**llama, "sliding_window": 4096}, "x")
    gpt = dict(_raw_catalog()["gpt-oss-20b"])
    with pytest.raises(CatalogError, match="layer_types"):
        model_spec_from_hf_config({**gpt, "layer_types": ["sliding_attention"] * 3}, "x")
    layers = llama["num_hidden_layers"]  # another kind of layer, where no window is set, was read as attention
    with pytest.raises(CatalogError, match=r"layer_types = \['linear_attention'.*must list 32 of sliding_attention"):
        model_spec_from_hf_config({**llama, "layer_types": ["linear_attention"] * layers}, "x")
    qwen = {k: v for k, v in _raw_catalog()["qwen3-8b"].items() if k != "published_params"}
    with pytest.raises(CatalogError, match=r"layer_types = \['foo', 'bar'\]"):
        model_spec_from_hf_config({**qwen, "layer_types": ["foo", "bar"]}, "x")
    assert model_spec_from_hf_config({**llama, "layer_types": ["full_attention"] * layers}, "x").sliding_window is None
    mxfp4 = {"quantization_config": {"quant_method": "mxfp4"}}  # experts only: a dense model kept its full size
    with pytest.raises(CatalogError, match="'mxfp4' quantizes only a mixture of experts' experts; model_type 'llama'"):
        model_spec_from_hf_config({**llama, **mxfp4}, "x")
    yarn = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": "x"}}
    with pytest.raises(
        CatalogError, match="rope_scaling yarn original_max_position_embeddings = 'x': must be a number"
    ):
        model_spec_from_hf_config({**llama, **yarn}, "x")
    qwen_moe = {k: v for k, v in _raw_catalog()["qwen3-30b-a3b"].items() if k != "published_params"}
    for layers in ({}, [True]):  # no list of layer indices: {} passed as an empty one, True as layer 1
        with pytest.raises(CatalogError, match="mlp_only_layers = .*: must be a list of layer indices"):
            model_spec_from_hf_config({**qwen_moe, "mlp_only_layers": layers}, "x")
    fp8_block = {"quantization_config": {"quant_method": "fp8", "weight_block_size": [True, 128]}}
    with pytest.raises(CatalogError, match=r"weight_block_size = \[True, 128\]: must be \[rows, columns\]"):
        model_spec_from_hf_config({**llama, **fp8_block}, "x")
    with pytest.raises(CatalogError, match="rope_scaling type 'dynamic'"):
        model_spec_from_hf_config({**llama, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "x")


def test_live_engine_refuses_what_it_does_not_run() -> None:
    runs = {"llama-3.3-70b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b"}  # gpu_engine/model.py's MoE
    for key in NEW_MODELS:
        assert (MODELS[key].live_engine_unsupported() == []) == (key in runs), key
    assert MODELS["deepseek-v3"].live_engine_unsupported() == [
        "mixture of experts of model_type deepseek_v3", "multi-head latent attention", "fp8 quantised weights",
        "model_type deepseek_v3", "rope_scaling yarn",
    ]  # fmt: skip
    assert MODELS["llama-3.1-8b"].live_engine_unsupported() == []
