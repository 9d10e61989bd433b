"""HF config.json -> `ModelSpec`: the catalog's models (stored with config.json key names) and a user's own
config.json go through the same `model_spec_from_hf_config`."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planner.catalog.architecture import (
    ArchitectureError,
    attention_fields,
    mla_fields,
    moe_fields,
    quantization_fields,
)
from planner.catalog.errors import CatalogError
from planner.scenario.rules import MAX_LAYERS
from sim.config import ModelSpec
from sim.json_keys import unique_keys

SUPPORTED_MODEL_TYPES = (
    "llama", "mistral", "qwen2", "qwen3", "qwen",
    "qwen3_moe", "mixtral", "gpt_oss", "gemma3_text", "gemma3", "deepseek_v3", "deepseek_v2",
)  # fmt: skip


# --- models --------------------------------------------------------------------------------------------


def _positive_int(config: Mapping[str, Any], key: str, name: str) -> int:
    if key not in config or config[key] is None:
        raise CatalogError(f"model {name!r}: config lacks required key {key!r}")
    value = config[key]
    # bool is an int subclass; `true` for a size is a typo, not 1.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise CatalogError(f"model {name!r}: {key} = {value!r}: must be a positive integer")
    return value


def _optional_positive_int(config: Mapping[str, Any], key: str, name: str) -> int | None:
    return None if config.get(key) is None else _positive_int(config, key, name)


def _float(config: Mapping[str, Any], key: str, default: float, name: str) -> float:
    value = config.get(key)
    if value is None:
        return default
    try:  # PyYAML reads "1e-06" (no dot) as a string; accept it rather than make users rewrite configs
        result = float(value)
    except (TypeError, ValueError):
        raise CatalogError(f"model {name!r}: {key} = {value!r}: must be a number") from None
    if isinstance(value, bool) or not math.isfinite(result) or result <= 0:
        raise CatalogError(f"model {name!r}: {key} = {value!r}: must be a positive, finite number")
    return result


def _bool(config: Mapping[str, Any], key: str, default: bool, name: str) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise CatalogError(f"model {name!r}: {key} = {value!r}: must be true or false")
    return value


def _rope_theta(config: Mapping[str, Any], key: str, name: str) -> float:
    # transformers v5 writes rope_theta inside `rope_parameters`; v4 configs (all published ones) at the top.
    if config.get(key) is None and isinstance(config.get("rope_parameters"), Mapping):
        return _float(config["rope_parameters"], "rope_theta", 10000.0, name)
    return _float(config, key, 10000.0, name)


LLAMA3_ROPE_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
SUPPORTED_ROPE_TYPES = ("default", "llama3", "linear", "yarn")
# Described for sizes and costs (Gemma 3's linear, gpt-oss's and DeepSeek-V3's YaRN); the live engine
# implements only llama3 and refuses these (ModelSpec.live_engine_unsupported).
DESCRIBED_ROPE_TYPES = ("linear", "yarn")
DESCRIBED_ROPE_NUMBERS = ("original_max_position_embeddings", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")


def _rope_scaling(config: Mapping[str, Any], name: str) -> dict | None:
    """None, or Llama-3.1's llama3 rescaling as {"rope_type": "llama3", <LLAMA3_ROPE_KEYS>: number}.

    v4 configs (the published ones) spell it `rope_scaling` (older ones with `type`), transformers v5
    writes `rope_parameters` (which also holds rope_theta, and rope_type "default" when unscaled).
    Any other type would change the live engine's rotary angles in a way it does not model: an error.
    """
    scaling = config.get("rope_scaling")
    if scaling is None:
        scaling = config.get("rope_parameters")
    if scaling is None:
        return None
    if not isinstance(scaling, Mapping):
        raise CatalogError(f"model {name!r}: rope_scaling = {scaling!r}: must be a mapping or null")
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    if rope_type == "default":
        return None
    if rope_type in DESCRIBED_ROPE_TYPES:
        # Described, not modelled (the live engine refuses them), and kept as given for the summary: their
        # factor must still be one.
        if scaling.get("factor") is None:
            raise CatalogError(f"model {name!r}: rope_scaling {rope_type} lacks factor")
        _float(scaling, "factor", 0.0, name)
        for key in DESCRIBED_ROPE_NUMBERS:  # shown in the summary as given: a number where one is meant
            value = scaling.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise CatalogError(f"model {name!r}: rope_scaling {rope_type} {key} = {value!r}: must be a number")
        return {**{k: v for k, v in scaling.items() if k != "type"}, "rope_type": rope_type}
    if rope_type != "llama3":
        raise CatalogError(
            f"model {name!r}: rope_scaling type {rope_type!r} is not supported (supported: "
            f"{', '.join(SUPPORTED_ROPE_TYPES)})"
        )
    missing = [key for key in LLAMA3_ROPE_KEYS if scaling.get(key) is None]
    if missing:
        raise CatalogError(f"model {name!r}: rope_scaling llama3 lacks {', '.join(missing)}")
    return {"rope_type": "llama3", **{key: _float(scaling, key, 0.0, name) for key in LLAMA3_ROPE_KEYS}}


# Gemma3TextConfig's defaults for keys the published configs leave out (transformers
# models/gemma3/configuration_gemma3.py): google/gemma-3-27b-it's text_config omits vocab_size, for one.
GEMMA3_TEXT_DEFAULTS = {
    "vocab_size": 262_208,
    "head_dim": 256,
    "max_position_embeddings": 131_072,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1_000_000.0,
    "tie_word_embeddings": True,
    "num_key_value_heads": 4,
    "sliding_window_pattern": 6,
}


def _flatten(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """Gemma 3's multimodal config.json keeps the language model in text_config: read that (the vision tower,
    ~0.4B parameters, is not modelled). gemma3_text gets its class defaults for absent keys."""
    if config.get("model_type") == "gemma3":
        text = config.get("text_config")
        if not isinstance(text, Mapping):
            raise CatalogError(f"model {name!r}: model_type gemma3 needs a text_config mapping")
        config = {**text, "model_type": "gemma3_text", "quantization_config": config.get("quantization_config")}
    if config.get("model_type") == "gemma3_text":
        layer_types = config.get("layer_types")
        defaults = dict(GEMMA3_TEXT_DEFAULTS)
        if layer_types is not None:
            del defaults["sliding_window_pattern"]
        config = {**defaults, **{k: v for k, v in config.items() if v is not None or k == "quantization_config"}}
    return config


def model_spec_from_hf_config(config: Mapping[str, Any], name: str, checkpoint: str | None = None) -> ModelSpec:
    """Normalise an HF config.json (as a dict) of a SUPPORTED_MODEL_TYPES model.

    Dense llama, mistral, qwen2, qwen3 and qwen; mixture of experts (qwen3_moe, mixtral, gpt_oss, deepseek_v2/
    v3), sliding-window layers (mistral v0.1, gpt_oss, gemma3), latent attention (deepseek) and quantised
    weights (quantization_config) are read by planner/catalog/architecture.py; anything it does not support is
    an error, never a silent dense reading. Keys that change neither sizes nor costs (dropout, token ids,
    activation clamps...) are ignored; `published_params` (a catalog-only key) is carried over when present.
    checkpoint: what vLLM would load (ModelSpec.checkpoint).
    """
    model_type = config.get("model_type")
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise CatalogError(
            f"model {name!r}: model_type = {model_type!r}: supported are {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    config = _flatten(config, name)
    model_type = config["model_type"]
    if config.get("mlp_bias"):  # Llama configs may ask for MLP biases; ModelSpec's formula has none
        raise CatalogError(f"model {name!r}: mlp_bias = true is not supported (ModelSpec has no MLP bias)")

    hidden = _positive_int(config, "hidden_size", name)
    heads = _positive_int(config, "num_attention_heads", name)
    num_layers = _positive_int(config, "num_hidden_layers", name)
    if num_layers > MAX_LAYERS:  # here, before the per-layer tuples are built: 10^12 layers would not fit in memory
        raise CatalogError(f"model {name!r}: num_hidden_layers = {num_layers}: must be in [1, {MAX_LAYERS:,}]")

    if model_type == "qwen":
        # First-generation Qwen (remote code) has its own key names. Its intermediate_size counts the two
        # gate/up halves (w1, w2) together: 22016 for an MLP width of 11008. c_attn always has a bias.
        mlp_double = _positive_int(config, "intermediate_size", name)
        if mlp_double % 2:
            raise CatalogError(f"model {name!r}: intermediate_size = {mlp_double}: qwen expects an even number")
        intermediate = mlp_double // 2
        kv_heads = heads  # no grouped-query attention in Qwen-1
        head_dim = _optional_positive_int(config, "kv_channels", name)
        max_pos = _positive_int(config, "seq_length", name)
        eps = _float(config, "layer_norm_epsilon", 1e-6, name)
        rope_theta = _rope_theta(config, "rotary_emb_base", name)
        attention_bias, qk_norm = True, False
    else:
        intermediate = _positive_int(config, "intermediate_size", name)
        # HF's default when the key is absent (Llama-2-7B/13B configs): one KV head per query head.
        kv_heads = _optional_positive_int(config, "num_key_value_heads", name) or heads
        head_dim = _optional_positive_int(config, "head_dim", name)
        max_pos = _positive_int(config, "max_position_embeddings", name)
        eps = _float(config, "rms_norm_eps", 1e-6, name)
        rope_theta = _rope_theta(config, "rope_theta", name)
        # Qwen2's config has no attention_bias key: the bias on q, k, v is part of the architecture.
        attention_bias = True if model_type == "qwen2" else _bool(config, "attention_bias", False, name)
        qk_norm = model_type in ("qwen3", "qwen3_moe", "gemma3_text")

    try:
        extra = {
            **moe_fields(config, model_type, num_layers, name),
            **attention_fields(config, model_type, num_layers, name),
            **mla_fields(config, model_type, name),
            **quantization_fields(config, name),
        }
    except ArchitectureError as err:
        raise CatalogError(str(err)) from None
    if extra.get("experts_only_quantized") and not extra.get("num_experts"):
        # MXFP4 quantizes the routed experts only: a dense model would be read at full size, silently
        raise CatalogError(
            f"model {name!r}: quantization_config.quant_method = 'mxfp4' quantizes only a mixture of experts' experts;"
            f" model_type {model_type!r} has none"
        )
    if extra.get("kv_lora_rank"):
        # MLA: a query head is qk_nope + qk_rope wide; there are no per-head K/V to cache (the latent is).
        head_dim = extra["qk_nope_head_dim"] + extra["qk_rope_head_dim"]
    if head_dim is None:
        if hidden % heads:
            raise CatalogError(
                f"model {name!r}: hidden_size {hidden} is not a multiple of num_attention_heads {heads}; give head_dim"
            )
        head_dim = hidden // heads
    if heads % kv_heads:
        raise CatalogError(
            f"model {name!r}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}"
        )

    published = config.get("published_params")
    if published is not None and (isinstance(published, bool) or not isinstance(published, int) or published <= 0):
        raise CatalogError(f"model {name!r}: published_params = {published!r}: must be a positive integer")

    return ModelSpec(
        name=name,
        model_type=model_type,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=num_layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=_positive_int(config, "vocab_size", name),
        max_position_embeddings=max_pos,
        # Every supported model class but Gemma defaults to untied when the key is absent (PretrainedConfig's
        # own default is True, but Llama/Mistral/Qwen2/Qwen3 configs override it to False).
        tie_word_embeddings=_bool(config, "tie_word_embeddings", False, name),
        attention_bias=attention_bias,
        qk_norm=qk_norm,
        rope_theta=rope_theta,
        rms_norm_eps=eps,
        rope_scaling=_rope_scaling(config, name),
        published_params=published,
        checkpoint=checkpoint,
        post_norms=model_type == "gemma3_text",
        # Speculative decoding: DeepSeek's MTP layers, an EAGLE-3 head's reduced LM head (sim/draft_model.py)
        num_nextn_predict_layers=_positive_int(config, "num_nextn_predict_layers", name)
        if config.get("num_nextn_predict_layers")
        else 0,
        draft_vocab_size=_positive_int(config, "draft_vocab_size", name) if config.get("draft_vocab_size") else 0,
        **extra,
    )


def load_model_config_path(path: str | Path, name: str | None = None) -> ModelSpec:
    """A ModelSpec from a local HF config.json, or from a model directory that contains one.

    `name` defaults to the model directory's name (the folder holding config.json).
    """
    path = Path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise CatalogError(f"{path}: no such config.json file or model directory")
    try:
        config = json.loads(file.read_text(encoding="utf-8"), object_pairs_hook=unique_keys)
    except (OSError, ValueError, RecursionError) as err:  # ValueError: not UTF-8, not JSON, a key given twice
        raise CatalogError(f"{file}: cannot read it as JSON: {err}") from None
    if not isinstance(config, dict):
        raise CatalogError(f"{file}: expected a JSON object at the top level")
    if name is None:
        name = file.parent.name if file.name == "config.json" else file.stem
    return model_spec_from_hf_config(config, name or str(file), checkpoint=str(file.parent.absolute()))
