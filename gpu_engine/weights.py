"""Weights for the live engine: seeded random ones (the default: timings do not depend on the values), or an
HF checkpoint read from a local safetensors directory.

Each of our parameters is the concatenation (along dim 0) of one or more checkpoint tensors, e.g.
qkv_proj = q_proj; k_proj; v_proj. The whole checkpoint is checked against the model (names and shapes)
before any tensor is read, so a wrong directory fails with one WeightLoadError and leaves the model as it was.
"""

from __future__ import annotations

import json
import re
from contextlib import ExitStack
from pathlib import Path

import torch
from safetensors import safe_open

from gpu_engine.model import Transformer
from sim.config import ModelSpec

# Per layer: our name (after "layers.N.") -> checkpoint names (after the family's layer prefix), in the
# order they are stacked. Entries for parameters a model does not have (bias, q_norm) are never asked for.
LLAMA_LAYER_NAMES = {
    "self_attn.qkv_proj.weight": ["self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"],
    "self_attn.qkv_proj.bias": ["self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"],
    "self_attn.o_proj.weight": ["self_attn.o_proj.weight"],
    "self_attn.q_norm.weight": ["self_attn.q_norm.weight"],
    "self_attn.k_norm.weight": ["self_attn.k_norm.weight"],
    "mlp.gate_up_proj.weight": ["mlp.gate_proj.weight", "mlp.up_proj.weight"],
    "mlp.down_proj.weight": ["mlp.down_proj.weight"],
    "input_layernorm.weight": ["input_layernorm.weight"],
    "post_attention_layernorm.weight": ["post_attention_layernorm.weight"],
}
# Qwen-7B (model_type "qwen", remote code): c_attn is already q; k; v. Its MLP is c_proj(w1(x) * silu(w2(x))),
# so w2 is the gate and w1 the up projection.
QWEN_LAYER_NAMES = {
    "self_attn.qkv_proj.weight": ["attn.c_attn.weight"],
    "self_attn.qkv_proj.bias": ["attn.c_attn.bias"],
    "self_attn.o_proj.weight": ["attn.c_proj.weight"],
    "mlp.gate_up_proj.weight": ["mlp.w2.weight", "mlp.w1.weight"],
    "mlp.down_proj.weight": ["mlp.c_proj.weight"],
    "input_layernorm.weight": ["ln_1.weight"],
    "post_attention_layernorm.weight": ["ln_2.weight"],
}
# family -> (layer prefix, per-layer names, top-level names)
CHECKPOINT_LAYOUTS = {
    "llama": (
        "model.layers.{}.",
        LLAMA_LAYER_NAMES,
        {"embed_tokens.weight": "model.embed_tokens.weight", "norm.weight": "model.norm.weight"},
    ),
    "qwen": (
        "transformer.h.{}.",
        QWEN_LAYER_NAMES,
        {"embed_tokens.weight": "transformer.wte.weight", "norm.weight": "transformer.ln_f.weight"},
    ),
}
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some checkpoints carry; recomputed here
MAX_LISTED = 5  # names shown per problem in an error message
INDEX_FORM = "a JSON object whose weight_map maps tensor names to .safetensors file names in its folder"


class WeightLoadError(Exception):
    """A checkpoint directory that does not fit the model: nothing was loaded."""


def init_random_weights(model: Transformer, seed: int, std: float = 0.02) -> None:
    """HF's init: matrices ~ N(0, std) (std = initializer_range), biases 0, norm weights 1. Seeded per device."""
    generator = torch.Generator(model.embed_tokens.weight.device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2:
                param.normal_(0.0, std, generator=generator)
            elif name.endswith("bias"):
                param.zero_()
            else:
                param.fill_(1.0)


def moe_layer_names(spec: ModelSpec) -> dict[str, list[str]]:
    """SparseMoE's parameters -> the per-expert checkpoint tensors stacked into them: Qwen3-MoE's
    mlp.experts.E.{gate,up,down}_proj, Mixtral's block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)}."""
    if spec.model_type == "mixtral":
        module, gate, up, down = "block_sparse_moe", "w1", "w3", "w2"
    else:
        module, gate, up, down = "mlp", "gate_proj", "up_proj", "down_proj"
    experts = range(spec.num_experts)
    return {
        "mlp.gate.weight": [f"{module}.gate.weight"],
        "mlp.w13": [f"{module}.experts.{e}.{p}.weight" for e in experts for p in (gate, up)],
        "mlp.w2": [f"{module}.experts.{e}.{down}.weight" for e in experts],
    }


def checkpoint_names(model: Transformer) -> dict[str, list[str]]:
    """Our parameter name -> the checkpoint tensors stacked (dim 0) to make it."""
    family = "qwen" if model.spec.model_type == "qwen" else "llama"
    layer_prefix, layer_names, top_names = CHECKPOINT_LAYOUTS[family]
    if model.spec.is_moe:
        layer_names = layer_names | moe_layer_names(model.spec)
    names = {}
    for name, _ in model.named_parameters():
        if match := re.fullmatch(r"layers\.(\d+)\.(.+)", name):
            prefix = layer_prefix.format(match[1])
            names[name] = [prefix + n for n in layer_names[match[2]]]
        else:
            names[name] = [top_names.get(name, name)]  # lm_head.weight keeps its name in every family
    return names


def load_weights(model: Transformer, path: str | Path) -> None:
    """Copy an HF checkpoint (model.safetensors, or shards listed in model.safetensors.index.json) into model."""
    files = _tensor_files(Path(path))
    names = checkpoint_names(model)
    with ExitStack() as stack:
        handles = {f: stack.enter_context(_open(f)) for f in set(files.values())}
        _check_checkpoint(model, names, files, handles, path)
        with torch.no_grad():
            for name, param in model.named_parameters():
                parts = [handles[files[n]].get_tensor(n) for n in names[name]]
                param.copy_(torch.cat(parts) if len(parts) > 1 else parts[0])


def _tensor_files(path: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it."""
    if not path.is_dir():
        raise WeightLoadError(f"{path}: not a directory")
    index = path / "model.safetensors.index.json"
    if index.exists():
        weight_map = _read_index(index)
        absent = sorted({f for f in weight_map.values() if not (path / f).exists()})
        if absent:
            raise WeightLoadError(f"{index} lists shards that are not there: {_first(absent)}")
        return {name: path / f for name, f in weight_map.items()}
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise WeightLoadError(f"{path}: no *.safetensors files (only safetensors checkpoints are read)")
    files = {}
    for shard in shards:
        with _open(shard) as f:
            files |= dict.fromkeys(f.keys(), shard)
    return files


def _read_index(index: Path) -> dict[str, str]:
    """The index's weight_map, checked: tensor names -> file names in the index's own folder (a name with a
    folder part, `..` or an absolute path would read a file the checkpoint does not hold)."""
    if not index.is_file():  # a folder, or a FIFO that would block the read forever: checked before opening
        raise WeightLoadError(f"{index}: not a regular file (a folder, FIFO, socket or device?); expected {INDEX_FORM}")
    try:
        data = json.loads(index.read_bytes())
    except OSError as e:
        raise WeightLoadError(f"{index}: cannot read it: {e.strerror or e}") from e
    except (ValueError, RecursionError) as e:  # not JSON, not UTF-8, or nested deeper than Python follows
        raise WeightLoadError(f"{index}: not JSON ({e}); expected {INDEX_FORM}") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        found = "no weight_map" if isinstance(data, dict) and "weight_map" not in data else _shown(data)
        raise WeightLoadError(f"{index}: found {found}; expected {INDEX_FORM}")
    for name, file in weight_map.items():
        if not isinstance(file, str) or file in ("", ".", "..") or Path(file).name != file:
            raise WeightLoadError(f"{index}: weight_map maps {_shown(name)} to {_shown(file)}; expected {INDEX_FORM}")
    return weight_map


def _shown(value) -> str:
    try:
        text = json.dumps(value)
    except (ValueError, RecursionError):  # an integer of > 4,300 digits, or nesting the encoder cannot follow
        text = f"<a JSON {type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _open(file: Path):
    if not file.is_file():  # a FIFO would block safe_open forever: checked before opening
        raise WeightLoadError(
            f"{file}: not a regular file (a folder, FIFO, socket or device?); expected a safetensors file"
        )
    try:
        return safe_open(file, framework="pt", device="cpu")
    except Exception as e:  # safetensors raises its own error types for a truncated or foreign file
        raise WeightLoadError(f"{file}: not a readable safetensors file ({e})") from e


def _check_checkpoint(model: Transformer, names: dict[str, list[str]], files: dict, handles: dict, path) -> None:
    """Raise one WeightLoadError listing every missing, unexpected and mis-shaped tensor."""
    wanted = {n for parts in names.values() for n in parts}
    missing = sorted(wanted - files.keys())
    unexpected = sorted(n for n in files.keys() - wanted if not _ignored(model, n))
    # An index can name a shard that does not hold the tensor (swapped entries): safetensors then raised its own
    # error mid-check.
    in_shards = {file: set(handle.keys()) for file, handle in handles.items()}
    misplaced = sorted(
        f"{n} (the index says {files[n].name})" for n in wanted & files.keys() if n not in in_shards[files[n]]
    )
    mismatched = []
    for name, param in model.named_parameters():
        if not all(n in files and n in in_shards[files[n]] for n in names[name]):
            continue
        shapes = [tuple(handles[files[n]].get_slice(n).get_shape()) for n in names[name]]
        # A 0-dimensional tensor stacks with nothing (it had no dim 0: an IndexError)
        stacked = (sum(s[0] for s in shapes), *shapes[0][1:]) if all(shapes) else ()
        if any(s[1:] != shapes[0][1:] for s in shapes) or stacked != tuple(param.shape):
            parts = " + ".join(f"{n} {list(s)}" for n, s in zip(names[name], shapes))
            mismatched.append(f"{name}: model wants {list(param.shape)}, checkpoint has {parts}")
    problems = [
        f"{label} ({len(items)}): {_first(items)}"
        for label, items in (
            ("missing", missing),
            ("not in the shard the index names", misplaced),
            ("unexpected", unexpected),
            ("shape mismatch", mismatched),
        )
        if items
    ]
    if problems:
        spec = model.spec
        raise WeightLoadError(f"{path} does not fit {spec.name} (model_type {spec.model_type}): " + "; ".join(problems))


def _ignored(model: Transformer, name: str) -> bool:
    # tied checkpoints sometimes still carry lm_head.weight (a copy of the embeddings); vLLM skips it too
    return name.endswith(IGNORED_SUFFIXES) or (model.lm_head is None and name == "lm_head.weight")


def _first(items: list[str]) -> str:
    more = f", ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return ", ".join(items[:MAX_LISTED]) + more
