"""LLMServingSim 2.0's per-layer profiles of vLLM 0.19's own kernels (casys-kaist/LLMServingSim,
`profiler/perf/`, MIT licence: planner/calibrations/llmservingsim/LICENSE), shipped as they were published
(csv files, microseconds) for the RTX 4090 (Ada) and the RTX PRO 6000 Blackwell Server Edition.

The profiler ran vLLM with `enforce_eager` and one hidden layer; tensor parallel 2 is emulated on one GPU with
each rank's shapes (`hf_overrides` in meta.yaml), so the tp2 rows hold no all-reduce. Each bundle gives:
dense.csv (the linear and elementwise kernels against tokens), attention.csv (one attention layer against a
prefill chunk over a cached prefix plus decode rows at one context), per_sequence.csv (the LM head and the
sampler against sampled rows) and, for the mixture of experts, moe.csv (the fused-MoE block against tokens and
activated experts, tp1 only).

`dense_rows` turns dense.csv into public_data.OperatorRow's shape, so the shipped profiles of these GPUs are
fitted by the same fitter and form as Vidur's (planner/calibration/public_fit.py).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass
from functools import cache

import numpy as np

from planner.calibration.public_data import OperatorRow, load_operators
from planner.calibration.shipped import PROFILE_DIR

LSS_DIR = PROFILE_DIR / "llmservingsim"
GPU_NAMES = {"RTX4090": "rtx-4090", "RTXPRO6000": "rtx-pro-6000"}


@dataclass(frozen=True)
class ModelShape:
    """The profiled model's shape (its config.json), whole model: tp divides it as vLLM's ranks do."""

    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # the dense MLP's; 0 for the mixture of experts (its MLP is moe.csv)
    vocab: int
    layers: int
    experts: int = 0
    top_k: int = 0
    expert_intermediate: int = 0


MODELS = {
    "Llama-3.1-8B": ModelShape(4096, 32, 8, 128, 14336, 128256, 32),
    "Qwen3-32B": ModelShape(5120, 64, 8, 128, 25600, 151936, 64),
    "Qwen3-30B-A3B-Instruct-2507": ModelShape(2048, 32, 4, 128, 0, 151936, 48, 128, 8, 768),
}
# One decoder layer's kernels in dense.csv, under Vidur's operator names (public_data.LAYER_OPERATORS): the
# norm runs twice (before attention, before the MLP), vLLM fuses the residual add into it (so `add` is 0), and
# the rotary embedding is counted with the per-head q/k norm that precedes it (Qwen3).
OPERATORS = {
    "input_layernorm": ("layernorm",),
    "attn_pre_proj": ("qkv_proj",),
    "attn_rope": ("qk_norm", "rotary_emb"),
    "attn_post_proj": ("o_proj",),
    "post_attention_layernorm": ("layernorm",),
    "mlp_up_proj": ("gate_up_proj",),
    "mlp_act": ("act_fn",),
    "mlp_down_proj": ("down_proj",),
    "add": (),
    "emb": ("embedding",),
}
TOKEN_GRID = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)


@dataclass(frozen=True)
class Bundle:
    gpu: str  # catalog name
    model: str
    tensor_parallel_size: int
    path: object  # the tp folder

    def csv(self, name: str) -> list[dict]:
        path = self.path / name
        if not path.exists():
            return []
        with path.open(newline="") as f:
            return list(csv.DictReader(f))

    @property
    def shape(self) -> ModelShape:
        return MODELS[self.model]


@cache
def bundles() -> tuple[Bundle, ...]:
    out = []
    for tp_dir in sorted(LSS_DIR.glob("*/*/*/bf16/tp*")):
        hardware, model = tp_dir.parts[-5], tp_dir.parts[-3]
        out.append(Bundle(GPU_NAMES[hardware], model, int(tp_dir.name[2:]), tp_dir))
    return tuple(out)


def dense_rows(b: Bundle) -> list[OperatorRow]:
    """One OperatorRow per token count of TOKEN_GRID: a decoder layer's dense kernels, with the model's whole
    shape (the fit divides by tp). None for the mixture of experts: its dense.csv holds attention's linears and
    the norms only, no whole layer (its MLP is moe.csv, compared on its own)."""
    if b.shape.experts:
        return []
    times: dict[str, dict[int, float]] = defaultdict(dict)
    for r in b.csv("dense.csv"):
        times[r["layer"]][int(r["tokens"])] = float(r["time_us"]) * 1e-3  # ms, as Vidur's rows
    m = b.shape
    rows = []
    for tokens in TOKEN_GRID:
        if tokens not in times["qkv_proj"]:
            continue
        ms = {op: sum(times[k][tokens] for k in kernels if k in times) for op, kernels in OPERATORS.items()}
        rows.append(
            OperatorRow(
                gpu=b.gpu, model=b.model, tensor_parallel_size=b.tensor_parallel_size, num_tokens=tokens,
                num_layers=m.layers, n_head=m.heads, n_kv_head=m.kv_heads, n_embd=m.hidden,
                n_expanded_embd=m.intermediate, vocab_size=m.vocab, use_gated_mlp=True, ms=ms,
            )
        )  # fmt: skip
    return rows


def attention_grid(b: Bundle) -> np.ndarray:
    """attention.csv as an array of (prefill_chunk, kv_prefill, n_decode, kv_decode, seconds)."""
    rows = b.csv("attention.csv")
    a = np.asarray([[float(r[k]) for k in ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")]
                    for r in rows])  # fmt: skip
    a[:, 4] *= 1e-6
    return a


def per_sequence(b: Bundle) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """layer (lm_head, sampler) -> (rows sampled, seconds)."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in b.csv("per_sequence.csv"):
        out[r["layer"]].append((float(r["sequences"]), float(r["time_us"]) * 1e-6))
    return {k: (np.asarray([x for x, _ in v]), np.asarray([t for _, t in v])) for k, v in out.items()}


def moe_grid(b: Bundle) -> np.ndarray:
    """moe.csv as an array of (tokens, activated experts, seconds); empty for a dense model."""
    rows = b.csv("moe.csv")
    if not rows:
        return np.empty((0, 3))
    a = np.asarray([[float(r["tokens"]), float(r["activated_experts"]), float(r["time_us"])] for r in rows])
    a[:, 2] *= 1e-6
    return a


def operator_rows() -> list[OperatorRow]:
    """Every profiled GPU's dense-layer rows: Vidur's (A100, A40, H100) and LLMServingSim's (RTX 4090, RTX PRO
    6000), in one shape."""
    return load_operators() + [r for b in bundles() for r in dense_rows(b)]
