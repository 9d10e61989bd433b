"""A decoder-only transformer for Llama, Mistral, Qwen (Qwen-7B), Qwen2 and Qwen3, built from a ModelSpec.

One layout covers them all (pre-norm, RMSNorm, neox-style RoPE, grouped-query attention, SwiGLU); the
families differ only in flags of the spec (q/k/v bias, per-head q/k norm, tied embeddings) and in the
checkpoint names, which `weights.py` maps. Projections are fused as in vLLM: q, k, v into `qkv_proj`,
gate and up into `gate_up_proj`.

The forward takes a flat packed batch (no padding, no batch dimension): the new tokens of every request
of the step, their positions, the step's AttentionMetadata and one (k_cache, v_cache) per layer.
RMSNorm, RoPE and softmax are computed in float32 whatever the weights' dtype.

Not modelled: sliding-window attention (Mistral-7B-v0.1's 4096-token window; ModelSpec has no field for
it) and Qwen-7B's dynamic-NTK / logn scaling, which only act beyond its 8192-token training length.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from gpu_engine.attention import AttentionMetadata, attention
from kernels.reference import rms_norm_ref
from sim.config import ModelSpec

KVCache = tuple[torch.Tensor, torch.Tensor]  # k, v: [num_blocks, block_size, num_kv_heads, head_dim]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [..., size]
        return rms_norm_ref(x, self.weight, self.eps)


def rope_cos_sin(head_dim: int, max_positions: int, theta: float) -> torch.Tensor:
    """[max_positions, head_dim] float32: cos of every position's angles, then sin (HF Llama's angles)."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / theta**exponents  # [head_dim // 2]
    angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq  # [max_pos, head_dim // 2]
    return torch.cat((angles.cos(), angles.sin()), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox style: rotate the two halves of each head. x: [T, heads, head_dim]; cos, sin: [T, 1, head_dim // 2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            spec.num_attention_heads,
            spec.num_key_value_heads,
            spec.head_dim,
        )
        self.q_size, self.kv_size = spec.q_size, spec.kv_size
        self.scale = spec.head_dim**-0.5
        self.qkv_proj = nn.Linear(spec.hidden_size, spec.q_size + 2 * spec.kv_size, bias=spec.attention_bias)
        self.o_proj = nn.Linear(spec.q_size, spec.hidden_size, bias=False)
        # Qwen3 normalises each head of q and k before RoPE
        self.q_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps) if spec.qk_norm else None
        self.k_norm = RMSNorm(spec.head_dim, spec.rms_norm_eps) if spec.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,  # [T, hidden]
        cos: torch.Tensor,  # [T, 1, head_dim // 2] float32
        sin: torch.Tensor,
        kv_cache: KVCache,
        attn: AttentionMetadata,
    ) -> torch.Tensor:  # [T, hidden]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)  # [T, H, D]
        k = k.view(-1, self.num_kv_heads, self.head_dim)  # [T, KVH, D]
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = attention(q, k, v, kv_cache, attn, self.scale)  # [T, H, D]
        return self.o_proj(o.flatten(1))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate_up_proj = nn.Linear(spec.hidden_size, 2 * spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [T, hidden]
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)  # [T, intermediate] each
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = Attention(spec)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = MLP(spec)

    def forward(self, x, cos, sin, kv_cache: KVCache, attn: AttentionMetadata) -> torch.Tensor:
        # x: [T, hidden]
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, kv_cache, attn)
        return h + self.mlp(self.post_attention_layernorm(h))


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(spec) for _ in range(spec.num_hidden_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        # tied: the logits reuse embed_tokens.weight, and there is no lm_head parameter at all
        tied = spec.tie_word_embeddings
        self.lm_head = None if tied else nn.Linear(spec.hidden_size, spec.vocab_size, bias=False)
        cos_sin = rope_cos_sin(spec.head_dim, spec.max_position_embeddings, spec.rope_theta)
        self.register_buffer("rope_cos_sin", cos_sin, persistent=False)  # float32 even in a bf16 model

    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int64
        positions: torch.Tensor,  # [T] int64
        attn: AttentionMetadata,
        kv_caches: list[KVCache],  # one per layer
    ) -> torch.Tensor:  # [len(attn.logits_indices), vocab] in the model's dtype
        x = self.embed_tokens(input_ids)  # [T, hidden]
        cos, sin = self.rope_cos_sin[positions].float().unsqueeze(1).chunk(2, dim=-1)  # [T, 1, head_dim // 2]
        for layer, kv_cache in zip(self.layers, kv_caches, strict=True):
            x = layer(x, cos, sin, kv_cache, attn)
        x = self.norm(x[attn.logits_indices])  # [R, hidden]: the norm is per row, so only sampled rows
        return F.linear(x, self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight)


@contextmanager
def _default_dtype(dtype: torch.dtype):
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def build_model(spec: ModelSpec, dtype: torch.dtype, device: torch.device | str) -> Transformer:
    """Parameters allocated directly on `device` in `dtype` (the RoPE table stays float32).

    Their values are torch's default init; call weights.init_random_weights or weights.load_weights.
    Do not `.to(dtype)` the result: that would round the float32 RoPE table too.
    """
    with torch.device(device), _default_dtype(dtype):
        return Transformer(spec).eval()
