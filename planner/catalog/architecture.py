"""The parts of an HF config.json beyond a dense Llama: mixture of experts, sliding-window and latent
attention, and quantised weights. Each reader returns ModelSpec keyword arguments, or raises CatalogError
naming the key, its value and what is supported; nothing is silently read as a dense model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planner.errors import PlannerError

MOE_MODEL_TYPES = ("qwen3_moe", "mixtral", "gpt_oss", "deepseek_v3", "deepseek_v2")
SUPPORTED_QUANT_METHODS = ("fp8", "awq", "gptq", "mxfp4")
# Keys that would make a model a mixture of experts; a model_type that is not MoE must not carry them.
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


class ArchitectureError(PlannerError, ValueError):
    """Raised as CatalogError by the caller (kept separate to avoid an import cycle)."""


def _int(config: Mapping[str, Any], key: str, name: str, *, minimum: int = 1, default: int | None = None) -> int:
    value = config.get(key)
    if value is None:  # absent or null: the class default (q_lora_rank null = no q compression)
        value = default
    if value is None:
        raise ArchitectureError(f"model {name!r}: config lacks required key {key!r}")
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ArchitectureError(f"model {name!r}: {key} = {value!r}: must be an integer >= {minimum}")
    return value


def _flag(config: Mapping[str, Any], key: str, default: bool, name: str) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ArchitectureError(f"model {name!r}: {key} = {value!r}: must be true or false")
    return value


def _first_key(config: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((key for key in keys if config.get(key) is not None), None)


def moe_fields(config: Mapping[str, Any], model_type: str, num_layers: int, name: str) -> dict[str, Any]:
    """Experts, top-k, expert width, shared experts and which layers stay dense.

    Dense-vs-MoE layers follow each family's modeling code (and vLLM's): Qwen3-MoE puts experts in layer i
    unless i is in mlp_only_layers, and only when (i + 1) % decoder_sparse_step == 0; DeepSeek-V2/V3 keep the
    first first_k_dense_replace layers dense and then use experts every moe_layer_freq layers; Mixtral and
    gpt-oss have experts in every layer.
    """
    count_key = _first_key(config, EXPERT_COUNT_KEYS)
    if model_type not in MOE_MODEL_TYPES:
        if count_key is not None and config[count_key] not in (0, 1):
            raise ArchitectureError(
                f"model {name!r}: {count_key} = {config[count_key]!r} but model_type {model_type!r} is dense; "
                f"mixture-of-experts model types are {', '.join(MOE_MODEL_TYPES)}"
            )
        return {}
    if count_key is None:
        raise ArchitectureError(f"model {name!r}: a {model_type} config needs one of {', '.join(EXPERT_COUNT_KEYS)}")
    experts = _int(config, count_key, name)
    top_k_key = "num_experts_per_tok" if "num_experts_per_tok" in config else "experts_per_token"
    top_k = _int(config, top_k_key, name)
    if top_k > experts:
        raise ArchitectureError(f"model {name!r}: {top_k_key} = {top_k} exceeds the {experts} experts")
    hidden_act = config.get("hidden_act", "silu")
    if model_type != "gpt_oss" and hidden_act != "silu":  # gpt-oss has its own clamped SwiGLU
        raise ArchitectureError(f"model {name!r}: hidden_act = {hidden_act!r}: supported is silu")

    if model_type == "qwen3_moe":
        step = _int(config, "decoder_sparse_step", name, default=1)
        only = config.get("mlp_only_layers")
        only = [] if only is None else only  # `{}` or false is no list of layers (it passed as one, empty)
        if not isinstance(only, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < num_layers for i in only
        ):
            raise ArchitectureError(f"model {name!r}: mlp_only_layers = {only!r}: must be a list of layer indices")
        dense = tuple(i for i in range(num_layers) if i in only or (i + 1) % step != 0)
        width = _int(config, "moe_intermediate_size", name)
        shared = 0  # Qwen3-MoE has no shared expert (Qwen2-MoE's shared_expert_intermediate_size is not read)
    elif model_type in ("deepseek_v3", "deepseek_v2"):
        first = _int(config, "first_k_dense_replace", name, minimum=0, default=0)
        freq = _int(config, "moe_layer_freq", name, default=1)
        dense = tuple(i for i in range(num_layers) if i < first or i % freq != 0)
        width = _int(config, "moe_intermediate_size", name)
        shared = _int(config, "n_shared_experts", name, minimum=0, default=0) * width
        scoring = config.get("scoring_func", "softmax")
        if scoring not in ("softmax", "sigmoid"):
            raise ArchitectureError(f"model {name!r}: scoring_func = {scoring!r}: supported are softmax, sigmoid")
    else:  # mixtral, gpt_oss: every layer, expert width = intermediate_size
        dense = ()
        width = _int(config, "intermediate_size", name)
        shared = 0
    return {
        "num_experts": experts,
        "num_experts_per_tok": top_k,
        "moe_intermediate_size": width,
        "shared_expert_intermediate_size": shared,
        "dense_layers": dense,
        "expert_bias": model_type == "gpt_oss",
        # Qwen3MoeConfig defaults to false (the published Qwen3 MoE configs say true); Mixtral and gpt-oss
        # always renormalise; DeepSeek's configs carry the key.
        "norm_topk_prob": _flag(config, "norm_topk_prob", model_type != "qwen3_moe", name)
        if model_type in ("qwen3_moe", "deepseek_v3", "deepseek_v2")
        else True,
    }


def attention_fields(config: Mapping[str, Any], model_type: str, num_layers: int, name: str) -> dict[str, Any]:
    """sliding_window and which layers use it, from layer_types, sliding_window_pattern or the family.

    - layer_types (gpt-oss, Gemma 3 in transformers >= 4.53): "sliding_attention" / "full_attention" per layer.
    - sliding_window_pattern p (Gemma 3's published config): layer i is global when (i + 1) % p == 0.
    - Mistral (v0.1) and Mixtral: a non-null sliding_window applies to every layer.
    - Qwen2/Qwen3(-MoE) carry sliding_window but use it only with use_sliding_window true (not supported).
    """
    types = config.get("layer_types")
    allowed = ("sliding_attention", "full_attention")
    if types is not None and (
        not isinstance(types, list) or len(types) != num_layers or any(t not in allowed for t in types)
    ):  # another kind of layer (linear attention, say) is not what the memory and cost models price
        raise ArchitectureError(
            f"model {name!r}: layer_types = {types!r}: must list {num_layers} of {', '.join(allowed)}"
        )
    window = config.get("sliding_window")
    if model_type in ("qwen2", "qwen3", "qwen3_moe"):
        if config.get("use_sliding_window"):
            raise ArchitectureError(
                f"model {name!r}: use_sliding_window = true (Qwen's window from max_window_layers) is not supported"
            )
        return {}
    if window is None:
        if any(t == "sliding_attention" for t in types or []):
            raise ArchitectureError(f"model {name!r}: layer_types has sliding_attention but sliding_window is null")
        return {}
    window = _int(config, "sliding_window", name)
    if types is not None:
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    elif config.get("sliding_window_pattern") is not None:
        pattern = _int(config, "sliding_window_pattern", name)
        sliding = tuple(i for i in range(num_layers) if (i + 1) % pattern != 0)
    elif model_type in ("mistral", "mixtral"):
        sliding = tuple(range(num_layers))
    else:
        raise ArchitectureError(
            f"model {name!r}: sliding_window = {window} without layer_types or sliding_window_pattern: which "
            "layers use it is not known for this model_type"
        )
    return {"sliding_window": window, "sliding_layers": sliding} if sliding else {}


def mla_fields(config: Mapping[str, Any], model_type: str, name: str) -> dict[str, Any]:
    """Multi-head latent attention ranks (DeepSeek-V2/V3); a latent rank on any other model is an error."""
    if model_type not in ("deepseek_v3", "deepseek_v2"):
        if config.get("kv_lora_rank"):
            raise ArchitectureError(
                f"model {name!r}: kv_lora_rank = {config['kv_lora_rank']!r} (latent attention) is only read for "
                "model_type deepseek_v2 / deepseek_v3"
            )
        return {}
    return {
        "q_lora_rank": _int(config, "q_lora_rank", name, minimum=0, default=0),  # null: no q compression (V2-Lite)
        "kv_lora_rank": _int(config, "kv_lora_rank", name),
        "qk_rope_head_dim": _int(config, "qk_rope_head_dim", name),
        "qk_nope_head_dim": _int(config, "qk_nope_head_dim", name),
        "v_head_dim": _int(config, "v_head_dim", name),
    }


def quantization_fields(config: Mapping[str, Any], name: str) -> dict[str, Any]:
    """quantization_config: fp8 (block or per-tensor), AWQ and GPTQ (bits, group_size), MXFP4 (gpt-oss)."""
    q = config.get("quantization_config")
    if q is None:
        return {}
    if not isinstance(q, Mapping):
        raise ArchitectureError(f"model {name!r}: quantization_config = {q!r}: must be a mapping")
    method = q.get("quant_method")
    if method not in SUPPORTED_QUANT_METHODS:
        raise ArchitectureError(
            f"model {name!r}: quantization_config.quant_method = {method!r}: supported are "
            f"{', '.join(SUPPORTED_QUANT_METHODS)}"
        )
    if method == "fp8":
        block = q.get("weight_block_size")
        if block is None:
            return {"quant_method": "fp8", "weight_bits": 8, "quant_group_size": 0}
        if not (
            isinstance(block, list)
            and len(block) == 2
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
        ):
            raise ArchitectureError(f"model {name!r}: weight_block_size = {block!r}: must be [rows, columns]")
        return {"quant_method": "fp8", "weight_bits": 8, "quant_group_size": block[0] * block[1]}
    if method == "mxfp4":  # 4-bit e2m1 weights with an e8m0 scale per 32 (OCP MX spec); experts only
        return {"quant_method": "mxfp4", "weight_bits": 4, "quant_group_size": 32, "experts_only_quantized": True}
    bits = _int(q, "bits", f"{name}: quantization_config")
    if bits not in (2, 3, 4, 8):
        raise ArchitectureError(f"model {name!r}: quantization_config.bits = {bits}: supported are 2, 3, 4, 8")
    group = q.get("group_size", 128)
    if isinstance(group, bool) or not isinstance(group, int) or (group <= 0 and group != -1):
        raise ArchitectureError(f"model {name!r}: quantization_config.group_size = {group!r}: a positive integer or -1")
    return {"quant_method": method, "weight_bits": bits, "quant_group_size": max(group, 0)}
