"""A model as the planner reads it: a decoder-only transformer normalised from an HF config.json (planner/catalog).

Part of the validated scenario (sim/config.py); kept apart because it is the largest class there and the one
the catalog, the memory and cost models and the live engine all read. No `from __future__ import annotations`,
as in sim/config.py: validation reads the type hints."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, normalised from an HF config.json (planner/catalog).

    Field names follow HF's Llama/Qwen2 config; `intermediate_size` is the dense MLP width (Qwen-7B's config
    says 22016, twice its width of 11008, because its gate and up projections are counted together).
    Mixture-of-experts, sliding-window, latent-attention and quantisation fields default to "absent", so a
    dense bf16 Llama needs none of them.
    """

    name: str
    model_type: (
        str  # llama | qwen2 | qwen3 | mistral | qwen | qwen3_moe | mixtral | gpt_oss | gemma3_text | deepseek_v3
    )
    hidden_size: int
    intermediate_size: int  # dense MLP width: gate, up [hidden -> intermediate], down [intermediate -> hidden]
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int  # < num_attention_heads: grouped-query attention
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q, k, v projections (Qwen, Qwen2; gpt-oss also on o)
    qk_norm: bool = False  # RMSNorm on each head of q and k (Qwen3, Gemma 3)
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    # RoPE frequency rescaling, as config.json's rope_scaling: None, or {"rope_type": ..., numbers}. Llama-3.1's
    # "llama3" changes the live engine's rotary angles; "linear" and "yarn" (Gemma 3, gpt-oss, DeepSeek-V3) are
    # described for sizes and costs only (the live engine refuses them). Not hashed: a dict.
    rope_scaling: dict | None = field(default=None, hash=False)
    published_params: int | None = None  # the model card's count, for the catalog test only
    # What vLLM loads (`vllm serve CHECKPOINT`): the HF repository id a catalog model was copied from, or the local
    # folder of a config read from a path; None for an inline mapping or an unpublished catalog model. Not compared:
    # two specs of one architecture are the same model to the simulator.
    checkpoint: str | None = field(default=None, compare=False)
    # --- mixture of experts (num_experts 0: a dense model) ---
    num_experts: int = 0  # routed experts per MoE layer (num_experts / num_local_experts / n_routed_experts)
    num_experts_per_tok: int = 0  # top-k of the router
    moe_intermediate_size: int = 0  # one routed expert's FFN width (SwiGLU: gate, up, down)
    shared_expert_intermediate_size: int = 0  # all shared experts together (DeepSeek: n_shared_experts x width)
    dense_layers: tuple[int, ...] = ()  # layers of a MoE model whose MLP is dense (first_k_dense_replace ...)
    expert_bias: bool = False  # gpt-oss: biases on the router and on every expert's projections
    norm_topk_prob: bool = True  # renormalise the top-k routing weights to sum to 1 (Mixtral always)
    # --- attention ---
    sliding_window: int | None = None  # tokens a sliding-window layer attends to (itself included)
    sliding_layers: tuple[int, ...] = ()  # the layers that use it (layer_types / sliding_window_pattern)
    post_norms: bool = False  # Gemma 3: post-attention and post-feedforward RMSNorms (4 norms per layer)
    # Multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank 0: none): K and V come from a cached latent of
    # kv_lora_rank plus a shared RoPE key of qk_rope_head_dim.
    q_lora_rank: int = 0  # 0: q projected directly from the hidden state
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # --- quantised weights (quantization_config; None: every weight in the scenario's dtype) ---
    quant_method: str | None = None  # fp8 | awq | gptq | mxfp4
    weight_bits: int = 16  # bits of a quantised weight
    quant_group_size: int = 0  # weights sharing one scale (fp8 block 128x128: 16384); 0: per tensor/channel
    experts_only_quantized: bool = False  # mxfp4 (gpt-oss): attention, router, embeddings stay in bf16
    # --- speculative decoding (0: absent) ---
    # Multi-token-prediction modules (DeepSeek-V3's num_nextn_predict_layers): loaded only when the engine speculates
    # with method mtp, which runs them as the drafter (sim/draft_model.py).
    num_nextn_predict_layers: int = 0
    # An EAGLE-3 head's own LM head is over a reduced vocabulary of this many tokens (its config.json's
    # draft_vocab_size, mapped onto the target's by its d2t table); 0: vocab_size.
    draft_vocab_size: int = 0

    def __post_init__(self) -> None:
        # A spec read back from JSON (calibration profiles) has lists; keep the dataclass hashable.
        for name in ("dense_layers", "sliding_layers"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def q_size(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        return self.num_key_value_heads * self.head_dim

    # --- structure ---

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def num_moe_layers(self) -> int:
        return self.num_hidden_layers - len(self.dense_layers) if self.is_moe else 0

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_hidden_layers - self.num_moe_layers

    @property
    def num_sliding_layers(self) -> int:
        return len(self.sliding_layers) if self.sliding_window else 0

    # --- parameters, split by how a step reads them ---

    @property
    def attention_linear_weights(self) -> int:
        """One layer's attention projection weights (biases excluded)."""
        h = self.hidden_size
        if self.is_mla:  # DeepseekV2MLAAttention: q_a/q_b (or q), kv_a (latent + rope key), kv_b, o
            heads, qk_head = self.num_attention_heads, self.qk_nope_head_dim + self.qk_rope_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * heads * qk_head if self.q_lora_rank else h * heads * qk_head
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * h
        return h * (self.q_size + 2 * self.kv_size) + self.q_size * h

    @property
    def expert_weights(self) -> int:
        """One routed expert's gate, up and down weights."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def dense_linear_weights(self) -> int:
        """Linear weights every token goes through (quantisable): attention, dense MLPs, shared experts."""
        per_layer_mlp = 3 * self.hidden_size * self.intermediate_size
        shared = 3 * self.hidden_size * self.shared_expert_intermediate_size
        return (
            self.num_hidden_layers * self.attention_linear_weights
            + self.num_dense_mlp_layers * per_layer_mlp
            + self.num_moe_layers * shared
        )

    @property
    def routed_expert_weights(self) -> int:
        """All routed experts' weights, stored (every expert of every MoE layer)."""
        return self.num_moe_layers * self.num_experts * self.expert_weights

    @property
    def other_params(self) -> int:
        """Never quantised: embeddings, lm_head, norms, biases, routers (gpt-oss's attention sinks, 64 per
        layer, and o_proj bias, hidden per layer, are counted; DeepSeek-V3's router score bias too)."""
        h, layers = self.hidden_size, self.num_hidden_layers
        norms = (4 if self.post_norms else 2) * h + (2 * self.head_dim if self.qk_norm else 0)
        norms += self.q_lora_rank + self.kv_lora_rank  # MLA's latent norms
        bias = self.q_size + 2 * self.kv_size if self.attention_bias else 0
        if self.model_type == "gpt_oss":
            bias += h + self.num_attention_heads  # o_proj bias and the per-head attention sinks
        router = h * self.num_experts + (
            self.num_experts if self.expert_bias or self.model_type == "deepseek_v3" else 0
        )
        expert_biases = self.num_experts * (2 * self.moe_intermediate_size + h) if self.expert_bias else 0
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        return (
            self.embedding_params
            + lm_head
            + h  # final norm
            + layers * (norms + bias)
            + self.num_moe_layers * (router + expert_biases)
        )

    @property
    def params_per_layer(self) -> int:
        """A decoder layer's parameters, averaged over the layers (exact for a model whose layers are alike)."""
        lm_head = 0 if self.tie_word_embeddings else self.embedding_params
        body = self.num_params - self.embedding_params - lm_head - self.hidden_size
        return body // self.num_hidden_layers

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        return self.dense_linear_weights + self.routed_expert_weights + self.other_params

    @property
    def active_params(self) -> int:
        """Parameters one token goes through: all but the routed experts it is not sent to."""
        unrouted = self.num_moe_layers * (self.num_experts - self.num_experts_per_tok) * self.expert_weights
        return self.num_params - unrouted

    # --- quantisation ---

    @property
    def quantized_bits_per_weight(self) -> float | None:
        """Stored bits of one quantised weight, its share of the scales (and zero points) included; None when
        the weights are not quantised. fp8 block quantisation (DeepSeek-V3, weight_block_size 128x128): one
        float32 scale per block. AWQ: an fp16 scale and a packed zero point per group. GPTQ: the same (its
        g_idx, one int32 per input row, is under 0.1% and left out). MXFP4 (gpt-oss): one uint8 exponent per
        32 weights."""
        if self.quant_method is None:
            return None
        bits = float(self.weight_bits)
        if self.quant_group_size:
            scale_bits = {"fp8": 32, "awq": 16 + self.weight_bits, "gptq": 16 + self.weight_bits, "mxfp4": 8}
            bits += scale_bits[self.quant_method] / self.quant_group_size
        return bits

    def weight_bytes(self, dtype_bytes: int) -> tuple[float, float]:
        """(dense, routed experts) stored bytes, with unquantised parameters in `dtype_bytes` each."""
        qbits = self.quantized_bits_per_weight
        experts = self.routed_expert_weights
        if qbits is None:
            return float((self.num_params - experts) * dtype_bytes), float(experts * dtype_bytes)
        dense_linear = self.dense_linear_weights
        dense_q = 0 if self.experts_only_quantized else dense_linear
        dense = (self.other_params + dense_linear - dense_q) * dtype_bytes + dense_q * qbits / 8
        return float(dense), experts * qbits / 8

    def live_engine_unsupported(self) -> list[str]:
        """What the live engine (gpu_engine) does not implement for this model; empty: it runs it."""
        problems = []
        if self.is_moe and self.model_type not in ("qwen3_moe", "mixtral"):
            problems.append(f"mixture of experts of model_type {self.model_type}")
        if self.is_mla:
            problems.append("multi-head latent attention")
        if self.quant_method:
            problems.append(f"{self.quant_method} quantised weights")
        if self.post_norms or self.model_type not in (
            "llama",
            "mistral",
            "qwen2",
            "qwen3",
            "qwen",
            "qwen3_moe",
            "mixtral",
        ):
            problems.append(f"model_type {self.model_type}")
        if self.rope_scaling and self.rope_scaling.get("rope_type") != "llama3":
            problems.append(f"rope_scaling {self.rope_scaling.get('rope_type')}")
        return problems
