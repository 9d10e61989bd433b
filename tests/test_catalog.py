"""The GPU and model catalogs, and HF config.json normalisation.

The parameter formula in `ModelSpec.num_params` is checked two ways: against the published counts (1%), and
exactly against transformers' own models built from the same catalog entries (tiny models for real, full-size
ones on the meta device, which allocates nothing), mixtures of experts, latent attention and sliding windows
included.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from planner.catalog import (
    CatalogError,
    _catalog_entries,
    _catalog_entry,
    gpu_spec_from_mapping,
    load_gpu_catalog,
    load_model_catalog,
    load_model_config_path,
    model_spec_from_hf_config,
)
from planner.scenario.yaml_loader import parse_packaged_yaml
from sim.config import GpuSpec, ModelSpec

MODELS = load_model_catalog()
GPUS = load_gpu_catalog()

REQUIRED_MODELS = [
    "qwen-7b", "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-8b", "qwen3-32b",
    "llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b",
    "tiny-llama", "tiny-qwen2",
    # issue 13: mixtures of experts, sliding-window, latent attention, quantised weights
    "llama-3.3-70b", "qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b", "gpt-oss-20b", "gpt-oss-120b",
    "gemma-3-27b", "deepseek-v3", "deepseek-v2-lite", "qwen3-32b-awq",
]  # fmt: skip
REQUIRED_GPUS = [
    "a10", "a10g", "l4", "l40s", "a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "rtx-4090",
    "mi300x", "cpu",
]  # fmt: skip
# Ampere has no fp8 tensor cores; nor does the CPU entry
NO_FP8 = {"a10", "a10g", "a40", "a100-40gb", "a100-80gb", "cpu"}


def kv_bytes_per_token(spec: ModelSpec, dtype_bytes: int = 2) -> int:
    return 2 * spec.num_hidden_layers * spec.num_key_value_heads * spec.head_dim * dtype_bytes


# --- model catalog ---------------------------------------------------------------------------------------


def test_catalog_has_required_models() -> None:
    assert set(REQUIRED_MODELS) <= set(MODELS)
    for key, spec in MODELS.items():
        assert spec.name == key


@pytest.mark.parametrize("key", sorted(k for k, s in MODELS.items() if s.published_params is not None))
def test_num_params_matches_published(key: str) -> None:
    spec = MODELS[key]
    assert spec.num_params == pytest.approx(spec.published_params, rel=0.01)


def test_kv_bytes_per_token() -> None:
    assert kv_bytes_per_token(MODELS["llama-2-7b"]) == 2 * 32 * 32 * 128 * 2 == 524_288
    assert kv_bytes_per_token(MODELS["llama-3.1-8b"]) == 131_072  # 8 KV heads: a quarter of Llama-2-7B's


def test_qwen_7b_normalisation() -> None:
    spec = MODELS["qwen-7b"]
    assert spec.intermediate_size == 11008  # half of the config's 22016
    assert spec.attention_bias and not spec.qk_norm
    assert spec.num_key_value_heads == spec.num_attention_heads == 32
    assert spec.head_dim == 128 and spec.max_position_embeddings == 8192
    assert spec.num_params * 2 == pytest.approx(15.44e9, rel=0.01)  # bf16 checkpoint size


def test_architecture_flags() -> None:
    for key in ["qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "tiny-qwen2"]:
        assert MODELS[key].attention_bias and not MODELS[key].qk_norm, key
    for key in ["qwen3-8b", "qwen3-32b"]:
        assert MODELS[key].qk_norm and not MODELS[key].attention_bias, key
        assert MODELS[key].head_dim == 128, key
    assert MODELS["qwen3-32b"].head_dim * MODELS["qwen3-32b"].num_attention_heads != MODELS["qwen3-32b"].hidden_size
    for key in ["llama-2-7b", "llama-3.1-8b", "mistral-7b", "tiny-llama"]:
        assert not MODELS[key].attention_bias and not MODELS[key].qk_norm, key
    assert MODELS["tiny-qwen2"].tie_word_embeddings and not MODELS["tiny-llama"].tie_word_embeddings


# --- transformers agrees with the parameter formula --------------------------------------------------------
# Each model is built by transformers from its catalog entry as it stands, the config.json fields themselves
# (the checkpoint's quantisation and the card's count aside), so the check covers the entry's normalisation
# (model_spec_from_hf_config) as well as the formula. First-generation Qwen is remote code only.
RAW_MODELS = parse_packaged_yaml((ROOT / "planner" / "catalog" / "models.yaml").read_text(encoding="utf-8"))
NOT_CONFIG_FIELDS = ("published_params", "quantization_config")


def _hf_model(key: str):
    """transformers' model for catalog entry `key` (CPU tensors or meta, per the caller's device)."""
    transformers = pytest.importorskip("transformers")
    fields = {name: value for name, value in RAW_MODELS[key].items() if name not in NOT_CONFIG_FIELDS}
    return transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**fields))


def _stored_numel(model) -> int:
    """What a checkpoint of the model stores: its parameters (a tied lm_head/embedding weight once, as the
    formula counts it) and its persistent buffers (DeepSeek-V3's router score-correction bias is one in
    transformers, a parameter loaded from the checkpoint in vLLM)."""
    buffers = sum(
        buffer.numel()
        for module in model.modules()
        for name, buffer in module.named_buffers(recurse=False)
        if name not in module._non_persistent_buffers_set
    )
    return sum(p.numel() for p in model.parameters()) + buffers


@pytest.mark.parametrize("key", ["tiny-llama", "tiny-qwen2"])
def test_tiny_models_match_transformers_exactly(key: str) -> None:
    pytest.importorskip("torch")
    assert _stored_numel(_hf_model(key)) == MODELS[key].num_params


# Every other catalog model, dense, mixture of experts, latent attention and sliding window alike: about 0.2 s
# each on the meta device (mixtral-8x7b, the first to build, pays transformers' lazy imports).
@pytest.mark.parametrize("key", sorted(k for k, s in MODELS.items() if s.model_type != "qwen"))
def test_models_match_transformers_on_meta_device(key: str) -> None:
    torch = pytest.importorskip("torch")
    with torch.device("meta"):  # shapes only: no memory, no init cost
        model = _hf_model(key)
    assert _stored_numel(model) == MODELS[key].num_params


# --- config.json normalisation -----------------------------------------------------------------------------

LLAMA_31_8B_CONFIG = {  # meta-llama/Llama-3.1-8B-Instruct config.json, as published (minus token ids)
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}


def _same_architecture(a: ModelSpec, b: ModelSpec) -> None:
    fields = [f.name for f in dataclasses.fields(ModelSpec) if f.name not in ("name", "published_params", "checkpoint")]
    assert {f: getattr(a, f) for f in fields} == {f: getattr(b, f) for f in fields}


def test_config_json_from_directory(tmp_path) -> None:
    model_dir = tmp_path / "Llama-3.1-8B-Instruct"
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(LLAMA_31_8B_CONFIG))
    spec = load_model_config_path(model_dir)
    assert spec.name == "Llama-3.1-8B-Instruct"
    _same_architecture(spec, MODELS["llama-3.1-8b"])


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"model_type": "llama", "hidden_size": 4096, "hidden_size": 8}', "key 'hidden_size' appears twice"),
        ("[" * 100_000, "maximum recursion depth exceeded"),  # nesting Python cannot follow
    ],
)
def test_a_config_json_that_gives_a_field_twice_or_nests_too_deep_is_refused(tmp_path, text, why) -> None:
    # json.loads keeps the last of two values silently: the model built would not be the file's.
    file = tmp_path / "config.json"
    file.write_text(text)
    with pytest.raises(CatalogError, match=f"{file}: cannot read it as JSON: {why}"):
        load_model_config_path(file)


def test_config_json_from_file(tmp_path) -> None:
    file = tmp_path / "llama.json"
    file.write_text(json.dumps(LLAMA_31_8B_CONFIG))
    spec = load_model_config_path(str(file), name="mine")
    assert spec.name == "mine"
    _same_architecture(spec, MODELS["llama-3.1-8b"])


def test_config_json_missing(tmp_path) -> None:
    with pytest.raises(ValueError, match="config.json"):
        load_model_config_path(tmp_path)  # a directory without config.json


def test_qwen2_bias_is_implied_and_head_dim_defaults() -> None:
    config = {
        "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 2048,
    }  # fmt: skip
    spec = model_spec_from_hf_config(config, "x")
    assert spec.attention_bias and spec.head_dim == 16 and not spec.tie_word_embeddings


def test_qwen_first_generation_keys() -> None:
    config = {  # Qwen/Qwen-7B-Chat's own key names
        "model_type": "qwen", "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
        "num_attention_heads": 32, "kv_channels": 128, "seq_length": 8192, "vocab_size": 151936,
        "layer_norm_epsilon": 1e-06, "rotary_emb_base": 10000, "tie_word_embeddings": False, "no_bias": True,
    }  # fmt: skip
    spec = model_spec_from_hf_config(config, "qwen")
    _same_architecture(spec, MODELS["qwen-7b"])
    assert spec.rms_norm_eps == 1e-6 and spec.rope_theta == 10000.0


def test_missing_key_and_unsupported_type_are_named() -> None:
    config = dict(LLAMA_31_8B_CONFIG)
    del config["vocab_size"]
    with pytest.raises(ValueError, match="vocab_size"):
        model_spec_from_hf_config(config, "x")
    with pytest.raises(ValueError, match="model_type.*gpt2"):
        model_spec_from_hf_config({**LLAMA_31_8B_CONFIG, "model_type": "gpt2"}, "x")
    with pytest.raises(ValueError, match="num_hidden_layers"):
        model_spec_from_hf_config({**LLAMA_31_8B_CONFIG, "num_hidden_layers": "32"}, "x")
    with pytest.raises(ValueError, match="seq_length"):  # qwen reads seq_length, not max_position_embeddings
        model_spec_from_hf_config({**LLAMA_31_8B_CONFIG, "model_type": "qwen"}, "x")
    assert issubclass(CatalogError, ValueError)


# --- GPU catalog ---------------------------------------------------------------------------------------------


def test_catalog_has_required_gpus() -> None:
    assert set(REQUIRED_GPUS) <= set(GPUS)


@pytest.mark.parametrize("key", sorted(GPUS))
def test_gpu_fields(key: str) -> None:
    gpu = GPUS[key]
    assert gpu.name == key
    assert isinstance(gpu.memory_bytes, int) and gpu.memory_bytes > 0
    assert gpu.bf16_tflops > 0 and gpu.memory_bandwidth_gbps > 0
    for f in ("interconnect_bandwidth_gbps", "tdp_w", "rental_usd_per_hour", "purchase_usd"):
        value = getattr(gpu, f)
        assert value is None or value > 0, f
    if key in NO_FP8:
        assert gpu.fp8_tflops is None
    else:
        # fp8 is twice bf16 on every part here (L40S's sheet: 733 vs 362.05, hence 2%): a sparse figure
        # copied into one of the two by mistake would break this
        assert gpu.fp8_tflops == pytest.approx(2 * gpu.bf16_tflops, rel=0.02)
    if key != "cpu":
        assert gpu.interconnect_bandwidth_gbps and gpu.tdp_w and gpu.rental_usd_per_hour


def test_gpu_memory_is_driver_reported_not_marketing() -> None:
    # What a process can see is below the marketing size: e.g. an "80 GB" H100 shows about 79.1 GiB.
    assert 79 * 2**30 < GPUS["h100-sxm"].memory_bytes < 80 * 2**30
    assert 22 * 2**30 < GPUS["a10"].memory_bytes < 24 * 10**9


def test_gpu_spec_from_mapping() -> None:
    spec = gpu_spec_from_mapping(
        {"memory_bytes": 24e9, "bf16_tflops": 100, "memory_bandwidth_gbps": 900, "tdp_w": 300}, "my-gpu"
    )
    assert spec == GpuSpec("my-gpu", 24_000_000_000, 100.0, 900.0, tdp_w=300.0)
    assert isinstance(spec.memory_bytes, int)
    with pytest.raises(ValueError, match="bf16_tflops"):
        gpu_spec_from_mapping({"memory_bytes": 1, "memory_bandwidth_gbps": 1}, "g")
    with pytest.raises(ValueError, match="memory_bandwidth_gbps"):
        gpu_spec_from_mapping({"memory_bytes": 1, "bf16_tflops": 1, "memory_bandwidth_gbps": -5}, "g")
    with pytest.raises(ValueError, match="memory_gb"):
        gpu_spec_from_mapping({"memory_gb": 24, "bf16_tflops": 1, "memory_bandwidth_gbps": 1}, "g")
    with pytest.raises(ValueError, match="memory_bytes"):
        gpu_spec_from_mapping({"memory_bytes": 1.5, "bf16_tflops": 1, "memory_bandwidth_gbps": 1}, "g")


def test_every_catalog_gpu_but_the_host_names_its_family_and_an_inline_gpu_may_not() -> None:
    """The vendor, architecture and memory kind that public profiles transfer by are written once, in the
    catalog entry (planner/calibration/transfer.py reads them there)."""
    from planner.calibration.transfer import choose_sources
    from planner.catalog import gpu_family, gpu_names

    for name in gpu_names():
        family = gpu_family(name)
        assert (family is None) == (name == "cpu"), name
    assert gpu_family("rtx-pro-6000").architecture == "blackwell-sm120"
    assert gpu_family("b200").architecture == "blackwell-sm100" and gpu_family("mi300x").vendor == "amd"
    assert gpu_family("an-inline-gpu") is None
    # The L40S (Ada, GDDR) takes no Ada source among the profiled GPUs: the GDDR ones (A40, RTX PRO 6000).
    assert choose_sources("l40s", ("a100-80gb", "a40", "h100-sxm", "rtx-pro-6000")) == (
        ("a40", "rtx-pro-6000"),
        "same_memory",
    )
    assert choose_sources("h200", ("a100-80gb", "a40", "h100-sxm")) == (("h100-sxm",), "same_architecture")
    with pytest.raises(ValueError, match="unknown field 'family'"):
        gpu_spec_from_mapping({"family": {}, "memory_bytes": 1, "bf16_tflops": 1, "memory_bandwidth_gbps": 1}, "g")


def test_catalogs_are_cached_but_callers_get_their_own_dict() -> None:
    a, b = load_gpu_catalog(), load_gpu_catalog()
    assert a == b and a is not b and a["a10"] is b["a10"]
    a.pop("a10")
    assert "a10" in load_gpu_catalog()


@pytest.mark.parametrize("filename", ["gpus.yaml", "models.yaml"])
def test_a_catalog_entry_read_alone_reads_as_in_the_whole_file(filename: str) -> None:
    # Start-up parses only the entries a scenario names, split at the top-level keys without YAML
    whole = parse_packaged_yaml((ROOT / "planner" / "catalog" / filename).read_text(encoding="utf-8"))
    entries = _catalog_entries(filename)
    assert list(entries) == list(whole)
    assert {name: _catalog_entry(filename, name) for name in entries} == whole


# --- packaged YAML -------------------------------------------------------------------------------------------

PACKAGED_YAML = sorted(
    [*(ROOT / "planner" / "catalog").glob("*.yaml"), *(ROOT / "planner" / "calibrations").rglob("*.yaml")]
)


@pytest.mark.parametrize("path", PACKAGED_YAML, ids=lambda p: p.name)
def test_packaged_yaml_reads_the_same_without_libyaml(path: Path) -> None:
    # parse_packaged_yaml uses libyaml's C parser where PyYAML has one: a PyYAML without it must give the same data
    text = path.read_text(encoding="utf-8")
    assert parse_packaged_yaml(text) == yaml.safe_load(text)


def test_an_empty_catalog_name_names_no_entry(capsys) -> None:
    """`planner catalog model ""` once listed every model (an empty name read as none given)."""
    from planner.cli import main

    assert main(["catalog", "model", ""]) == 2
    assert "no model named '' in the catalog; known: " in capsys.readouterr().err
