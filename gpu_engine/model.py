"""A decoder-only transformer for Llama, Mistral, Qwen (Qwen-7B), Qwen2, Qwen3 and the mixtures of experts
Qwen3-MoE and Mixtral, built from a ModelSpec.

One layout covers them all (pre-norm, RMSNorm, neox-style RoPE, grouped-query attention, SwiGLU); the
families differ only in flags of the spec (q/k/v bias, per-head q/k norm, tied embeddings) and in the
checkpoint names, which `weights.py` maps. Projections are fused as in vLLM: q, k, v into `qkv_proj`,
gate and up into `gate_up_proj`.

The forward takes a flat packed batch (no padding, no batch dimension): the new tokens of every request
of the step, their positions, the step's AttentionMetadata and one (k_cache, v_cache) per layer.
As in vLLM, each layer takes and returns (hidden, residual): the residual add is fused into the next
RMSNorm, RoPE rotates q and k in place inside the fused qkv output, and silu(gate) * up is one kernel, so a
decode layer on CUDA is ten launches (norm, qkv, rotary, store_kv, attention, o_proj, norm, gate_up,
silu_and_mul, down; one more to merge KV splits). The kernels come from attention.kernel_ops: Triton on
CUDA, the torch references of kernels/reference.py elsewhere. Both round as transformers does (RMSNorm's
variance and softmax in float32; the weight multiply, RoPE and SwiGLU in the model's dtype).

Sliding-window layers (Mistral v0.1, Mixtral with a window) pass their window to the paged attention (the
Triton kernel and the torch reference alike), which reads only the keys inside it. Not implemented, and refused
(ModelSpec.live_engine_unsupported): other mixtures of experts, latent attention, quantised weights, RoPE
scalings other than llama3. Not modelled: Qwen-7B's dynamic-NTK / logn scaling, which only act beyond its
8192-token training length.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn

from gpu_engine.attention import AttentionMetadata, KernelOps, attention, kernel_ops
from planner_kernels.reference import rope_cos_sin_cache
from sim.config import ModelSpec

KVCache = tuple[torch.Tensor, torch.Tensor]  # k, v: [num_blocks, block_size, num_kv_heads, head_dim]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor, ops: KernelOps, residual: torch.Tensor | None = None):
        """x: [T, size] -> normed, or with residual (x + residual) -> (normed, new residual)."""
        return ops.rms_norm(x, self.weight, self.eps, residual)


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int = 0):
        super().__init__()
        # a sliding-window layer attends to the last `window` positions (0: every position)
        self.window = spec.sliding_window if layer in spec.sliding_layers else 0
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
        positions: torch.Tensor,  # [T]
        x: torch.Tensor,  # [T, hidden]
        kv_cache: KVCache,
        attn: AttentionMetadata,
        cos_sin_cache: torch.Tensor,  # [max_positions, head_dim]
        ops: KernelOps,
    ) -> torch.Tensor:  # [T, hidden]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(-1, self.num_heads, self.head_dim)  # [T, H, D], a view into the qkv output
        k = k.view(-1, self.num_kv_heads, self.head_dim)  # [T, KVH, D]
        v = v.view(-1, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:  # per head: rows of head_dim
            q = self.q_norm(q.reshape(-1, self.head_dim), ops).view(-1, self.num_heads, self.head_dim)
            k = self.k_norm(k.reshape(-1, self.head_dim), ops).view(-1, self.num_kv_heads, self.head_dim)
        ops.rotary(positions, q, k, cos_sin_cache)  # in place
        o = attention(q, k, v, kv_cache, attn, self.scale, ops, self.window)  # [T, H, D]
        return self.o_proj(o.flatten(1))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.gate_up_proj = nn.Linear(spec.hidden_size, 2 * spec.intermediate_size, bias=False)
        self.down_proj = nn.Linear(spec.intermediate_size, spec.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, ops: KernelOps) -> torch.Tensor:  # x: [T, hidden]
        return self.down_proj(ops.silu_and_mul(self.gate_up_proj(x)))  # [T, 2 * intermediate] -> [T, hidden]


class SparseMoE(nn.Module):
    """Top-k routed SwiGLU experts (Qwen3-MoE, Mixtral), in vLLM's FusedMoE layout: `w13` holds every
    expert's gate; up rows ([experts * 2 * width, hidden]), `w2` every expert's down ([experts * hidden,
    width]). Routing as transformers' TopKRouter: softmax in float32 over the router logits, top-k, the k
    weights renormalised (norm_topk_prob), cast to the model's dtype. Then one matmul pair per expert over the
    tokens routed to it, weighted and summed into the output (a loop of torch matmuls, not a grouped GEMM)."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.num_experts, self.top_k = spec.num_experts, spec.num_experts_per_tok
        self.width, self.hidden = spec.moe_intermediate_size, spec.hidden_size
        self.renormalize = spec.norm_topk_prob
        self.gate = nn.Linear(spec.hidden_size, spec.num_experts, bias=False)
        self.w13 = nn.Parameter(torch.empty(spec.num_experts * 2 * self.width, spec.hidden_size))
        self.w2 = nn.Parameter(torch.empty(spec.num_experts * spec.hidden_size, self.width))

    def forward(self, x: torch.Tensor, ops: KernelOps) -> torch.Tensor:  # x: [T, hidden]
        probs = torch.softmax(self.gate(x), dim=-1, dtype=torch.float32)  # [T, experts]
        weights, experts = torch.topk(probs, self.top_k, dim=-1)  # [T, k]
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        weights = weights.to(x.dtype)
        w13 = self.w13.view(self.num_experts, 2 * self.width, self.hidden)
        w2 = self.w2.view(self.num_experts, self.hidden, self.width)
        out = torch.zeros_like(x)
        for expert in experts.unique().tolist():
            token, slot = torch.where(experts == expert)
            y = F.linear(ops.silu_and_mul(F.linear(x[token], w13[expert])), w2[expert])
            out.index_add_(0, token, y * weights[token, slot, None])
        return out


class DecoderLayer(nn.Module):
    def __init__(self, spec: ModelSpec, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.self_attn = Attention(spec, layer)
        self.post_attention_layernorm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.mlp = SparseMoE(spec) if spec.is_moe and layer not in spec.dense_layers else MLP(spec)

    def forward(
        self,
        positions: torch.Tensor,  # [T]
        x: torch.Tensor,  # [T, hidden]: the previous layer's output, not yet added to the residual
        residual: torch.Tensor | None,  # [T, hidden]; None before the first layer
        kv_cache: KVCache,
        attn: AttentionMetadata,
        cos_sin_cache: torch.Tensor,
        ops: KernelOps,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # (x, residual): the layer's output is their sum
        if residual is None:
            x, residual = self.input_layernorm(x, ops), x
        else:
            x, residual = self.input_layernorm(x, ops, residual)
        x = self.self_attn(positions, x, kv_cache, attn, cos_sin_cache, ops)
        x, residual = self.post_attention_layernorm(x, ops, residual)
        return self.mlp(x, ops), residual


class Transformer(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        unsupported = spec.live_engine_unsupported()
        if unsupported:  # a MoE / sliding-window / MLA / quantised model must not run as a dense one
            raise ValueError(f"model {spec.name}: the live engine does not implement {', '.join(unsupported)}")
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(spec, i) for i in range(spec.num_hidden_layers))
        self.norm = RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        # tied: the logits reuse embed_tokens.weight, and there is no lm_head parameter at all. An EAGLE-3 head's
        # LM head is its own, over its draft vocabulary (vllm/model_executor/models/llama_eagle3.py)
        tied = spec.tie_word_embeddings and not spec.draft_vocab_size
        logits_vocab = spec.draft_vocab_size or spec.vocab_size
        self.lm_head = None if tied else nn.Linear(spec.hidden_size, logits_vocab, bias=False)
        # in the model's dtype (computed in float32, then cast, as HF casts cos and sin)
        cos_sin = rope_cos_sin_cache(
            spec.head_dim, spec.max_position_embeddings, spec.rope_theta, spec.rope_scaling, torch.get_default_dtype()
        )
        self.register_buffer("cos_sin_cache", cos_sin, persistent=False)

    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int32 or int64
        positions: torch.Tensor,  # [T] int32 or int64
        attn: AttentionMetadata,
        kv_caches: list[KVCache],  # one per layer
    ) -> torch.Tensor:  # [len(attn.logits_indices), draft_vocab_size or vocab_size] in the model's dtype
        ops = kernel_ops(input_ids.device.type)
        x, residual = self.embed_tokens(input_ids), None  # [T, hidden]
        if len(kv_caches) != len(self.layers):
            raise ValueError(f"{len(kv_caches)} KV caches for {len(self.layers)} layers")
        for i, (layer, kv_cache) in enumerate(zip(self.layers, kv_caches)):
            # the kernels check their inputs in the first layer only: the rest see the same shapes
            x, residual = layer(positions, x, residual, kv_cache, attn, self.cos_sin_cache, ops if i == 0 else ops.fast)
        rows = attn.logits_indices  # the norm is per row, so only the sampled rows
        x, _ = self.norm(x[rows], ops, residual[rows])  # [R, hidden]
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
    """Parameters and the RoPE table allocated directly on `device` in `dtype`.

    Their values are torch's default init; call weights.init_random_weights or weights.load_weights.
    """
    with torch.device(device), _default_dtype(dtype):
        return Transformer(spec).eval()
