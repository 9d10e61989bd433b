"""How long a step takes: a grey-box roofline over the step's batch (DESIGN.md, "Cost model").

A step has a device side and a host (CPU) side.

Device: each term combines a compute time, flops / (peak_flops * flops_efficiency), and a memory time, bytes /
(peak_bw * bandwidth_efficiency): the linear layers (the weights the step reads, once, at their stored size:
for a mixture of experts the dense part plus the experts its tokens are routed to; 2 flops per weight a token
goes through, at the GPU's fp8 rate for fp8 weights) and the LM head over the sampled rows, which are GEMMs,
as sqrt(compute^2 + memory^2) (`gemm_s`: why below); attention over the cached context (each row's K/V, or
MLA's latent, read once per layer; 4 flops per head_dim per query-key pair: QK^T and PV; sliding-window layers
over the window only) and the KV writes as max(compute, memory); the elementwise kernels (norms with their
residual adds, rotary, activation) as their activation bytes, added; under tensor parallel two ring
all-reduces of the hidden states per layer (their host launch wait paid with the launches); the kernel
launches the device waits for, per layer, which CUDA graphs remove for decode batches up to the largest
capture size; and per-request work per layer that does not scale with tokens (0 for batched attention
kernels).

Host: scheduling and input preparation per step, plus block tables, sampling and detokenising per row, plus
admitting a request and preparing its prompt's inputs per row computing prompt tokens.

The coefficients themselves, each default with its source, are sim/cost_coefficients.py's.

How they combine follows vLLM v1: with async scheduling (its default; `AsyncScheduler` in
vllm/v1/core/sched/async_scheduler.py, driven by `EngineCore.step_with_batch_queue`) the CPU schedules and
prepares step N+1 while the GPU runs step N, so a step takes max(host, device); the first step after the
engine was idle has nothing to hide behind and takes host + device. `engine.async_scheduling: false` (vLLM
before its V1 engine) is the serial model (host + device), `engine.enforce_eager: true` too (and every launch
paid), as is the `cpu` device, where host and "device" share the same cores. The coefficients are few and physical so that calibration can fit them.

Why the GEMMs are a 2-norm, not max(compute, memory): measured GEMMs do not turn sharply from bandwidth- to
compute-bound at the ridge point (tokens = peak_flops / bandwidth, ~150-300 on these GPUs): near it they run
slower than max() says (tiles that do not fill the GPU's waves, weight reads and math overlapping only
partly), and a max() fit to Vidur's public per-layer timings (A100, A40, H100 at tp 1-8: docs/fidelity.md)
could not get below 11.5-14.9% p90 however its efficiencies were set. (c^p + m^p)^(1/p) with p fitted per GPU
and tp lands at p = 1.54-2.21 (2 within two standard errors in 8 of 12 fits) and a free p improves the median
by at most 0.8 points over p = 2, so p is fixed at 2: no extra coefficient. The 2-norm is 41% above max() at
the ridge and within 3% of it a factor of 4 either side; with the elementwise kernels' traffic as a term of
its own (`elementwise_elements_per_token`) it brings the per-layer fit to 1.9-4.1% median, 6.2-10.0% p90
(`python -m planner.fidelity`, "The cost model's form"). Attention and the KV writes keep max(): no
measurement here covers them (whether their kernels turn as gradually is not known), so they keep the form
they had. `floors` keeps max() too: it is a bound no engine can beat, at 100% of the spec peaks.

Works on scalars and numpy arrays; one step's path stays on plain floats (the simulator's speed). What it prices
(the weights a rank holds and reads, the KV bytes per token, the experts' placement, whether steps are serial
and graphed) is the engine's facts (sim/engine_facts.py), derived once and handed in.
"""

from __future__ import annotations

import math

import numpy as np

from sim.config import HOST_DEVICES
from sim.cost_coefficients import CostCoefficients
from sim.engine_facts import EngineFacts
from sim.errors import StepTimeError
from sim.peak_rates import linear_peak_flops, peak_flops

# An idle spell this long or longer makes the next step pay `idle_wake_s`: measured on this repository's 2-vCPU
# machine (`python -m gpu_engine.sweep_idle`), steps after 1 ms of idle ran as fast as back to back ones, steps
# after 10 to 100 ms slower by about the same amount.
IDLE_WAKE_AFTER_S = 0.005


def expected_experts_touched(num_tokens, num_experts: int, top_k: int):
    """Distinct experts a step's num_tokens tokens activate in one MoE layer, in expectation, if each token's
    top-k set is a uniformly random k-subset: each expert is missed by one token with probability 1 - k/E,
    so E * (1 - (1 - k/E)^n). Real routers are not uniform (some experts are hot), which touches fewer
    experts at mid batch sizes: this errs towards more bytes. Works on floats and numpy arrays."""
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** num_tokens)


def expected_local_experts_touched(num_tokens, num_experts: int, top_k: int, num_local_experts: int):
    """Of one rank's num_local_experts (expert parallel), the distinct ones a step's tokens activate, in
    expectation: every expert is touched with the same probability, so the local share of
    `expected_experts_touched`. The busiest rank sets the step time; this prices the rank that holds the
    most experts at its expected load, not the expected maximum over ranks of a random routing (which is
    higher at small batches, e.g. one token's top-k landing on fewer ranks than k): a lower bound there."""
    return expected_experts_touched(num_tokens, num_experts, top_k) * (num_local_experts / num_experts)


def gemm_s(compute_s, memory_s):
    """A GEMM's seconds from its compute time and its memory time: their 2-norm, sqrt(c^2 + m^2), which turns
    gradually at the ridge as measured GEMMs do (module docstring). The one form the simulator, `planner
    calibrate`'s fit and the shipped profiles' fit (planner/calibration/public_fit.py) share."""
    if isinstance(compute_s, np.ndarray) or isinstance(memory_s, np.ndarray):
        return np.hypot(compute_s, memory_s)
    return math.hypot(compute_s, memory_s)  # one step: plain floats are 10x faster than numpy scalars


def elementwise_elements_per_token(hidden_size: int, qk_width: float, mlp_width: float, num_norms: int = 2) -> float:
    """Activation elements one token's elementwise kernels read and write in one layer, on one rank: each
    RMSNorm with its residual add (vLLM's fused_add_rms_norm, vllm/model_executor/layers/layernorm.py: reads
    the hidden state and the residual, writes both) over the full hidden state, which tensor parallel does
    not split; the rotary embedding in place on this rank's q and k (`qk_width` elements: read, write); the
    gated activation (SiluAndMul, activation.py: reads gate and up, writes one; `mlp_width` per rank). These
    kernels stream activations, not weights, so their time grows with tokens x hidden_size whatever tp is:
    the weights' roofline, divided by tp, cannot absorb them (docs/fidelity.md, "The cost model's form").
    Per-head q/k norms (qk_norm) are not counted."""
    return 4 * num_norms * hidden_size + 2 * qk_width + 3 * mlp_width


# The kernels of the layers kernel_floor_per_layer_s was fitted on (Vidur's operators: two norms, QKV, rotary,
# O, up, activation, down, the residual add; planner/calibration/public_data.LAYER_OPERATORS).
REFERENCE_KERNELS = 9


def kernels_per_layer(facts: EngineFacts) -> float:
    """Kernels a decoder layer runs besides attention and its all-reduces, on average over the layers, as vLLM
    runs the architecture (model_executor/models/*.py, fused_moe, the fp8 linear methods): the REFERENCE_KERNELS
    of a dense layer; Qwen3's and Gemma 3's per-head q/k norms (one each); Gemma 3's two post-norms; MLA's
    extra projections and norms (q_a, q_a_layernorm, q_b, kv_a, kv_a_layernorm; decode's absorbed W_UK and
    W_UV batched GEMMs); an MoE layer's router GEMM, top-k, the tokens' sort by expert (moe_align_block_size)
    and the weighted sum (the fused kernel's two GEMMs and activation replace the dense MLP's three), and its
    shared experts' own MLP; block-scaled fp8's per-token-group quantisation of each GEMM's activations. Each
    is a kernel with a fixed device time of a few microseconds at decode sizes: CUDA graphs remove their host
    launches, not that time."""
    m = facts.model
    kernels = float(REFERENCE_KERNELS)
    kernels += 2 * m.qk_norm + 2 * m.post_norms
    gemms = 4.0  # QKV, O, gate/up, down
    if m.is_mla:
        kernels += 7
        gemms += 5
    if m.is_moe:
        share = m.num_moe_layers / m.num_hidden_layers
        shared = 3 if m.shared_expert_intermediate_size else 0
        kernels += share * (4 + shared)
        gemms += share * (1 + (2 if shared else 0))
    if m.quant_method == "fp8" and m.quant_group_size:
        kernels += gemms
    return kernels


def _minimum(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return min(a, b)  # one step: plain floats


class CostModel:
    """A step's seconds on one engine, its facts priced with one set of coefficients."""

    def __init__(self, facts: EngineFacts, coefficients: CostCoefficients | None = None) -> None:
        m, tp = facts.model, facts.tensor_parallel_size
        self.facts = facts
        c = self.coefficients = coefficients or CostCoefficients()
        dtype_bytes = facts.dtype_bytes
        self.serial = facts.serial  # host and device work add up (no async scheduling)
        self.capture_size = facts.cudagraph_capture_size
        # A decode row's query tokens: 1, or 1 + k verifying k drafts (speculative decoding). vLLM captures its full
        # CUDA graphs for uniform batches of that many tokens per request (`uniform_decode_query_len`), and MLA's
        # backends take rows of up to that many tokens as decodes (`reorder_batch_threshold`).
        spec = facts.engine.speculative
        self.decode_query_len = 1 if spec is None else 1 + spec.num_speculative_tokens
        self.launch_s = c.launch_overhead_per_layer_s * m.num_hidden_layers
        # The floor was fitted on layers of REFERENCE_KERNELS kernels; a layer that runs more (MLA, a router and
        # its sort, shared experts, fp8 activation quantisation) pays each one's fixed time too.
        self.kernel_floor_s = (
            c.kernel_floor_per_layer_s * m.num_hidden_layers * kernels_per_layer(facts) / REFERENCE_KERNELS
        )
        self.attention_floor_s = (
            0.0 if facts.hardware.gpu.name in HOST_DEVICES else (c.attention_floor_per_layer_s * m.num_hidden_layers)
        )
        self.row_s = c.per_row_layer_overhead_s * m.num_hidden_layers
        self.idle_wake_s = c.idle_wake_s or 0.0  # added to the first step after the engine waited for work
        self.flops_per_s = peak_flops(facts) * c.flops_efficiency
        self.linear_flops_per_s = linear_peak_flops(facts) * c.flops_efficiency
        self.bytes_per_s = facts.gpu.memory_bandwidth_gbps * 1e9 * c.bandwidth_efficiency
        rates = (self.flops_per_s, self.linear_flops_per_s, self.bytes_per_s)
        if not all(0 < rate < math.inf for rate in rates):  # before anything divides by them
            self._refuse(f"compute at {self.flops_per_s:g} flop/s, memory at {self.bytes_per_s:g} B/s")
        # The decoder layers' weights: everything stored but the embeddings, the lm_head and the final norm.
        outside = m.embedding_params * (1 if m.tie_word_embeddings else 2) + m.hidden_size
        dense_bytes, expert_bytes = facts.dense_weight_bytes, facts.expert_weight_bytes
        # What vLLM replicates (MLA's down-projections, the routers) every rank reads and computes whole.
        replicated_params, replicated_bytes = facts.replicated_params, facts.replicated_weight_bytes
        self.linear_bytes = (dense_bytes - outside * dtype_bytes - replicated_bytes) / tp + replicated_bytes
        self.linear_flops_per_token = 2 * (m.active_params - outside - replicated_params) / tp + 2 * replicated_params
        # Routed experts: a step reads the distinct experts its tokens go to, in every MoE layer. Without
        # expert parallel each rank holds a 1/tp slice of all num_experts; with it (`EngineFacts.
        # max_local_experts`) the busiest rank holds local_experts whole ones and computes the tokens routed to
        # them: on average local_experts / num_experts of every token's top-k (the same as 1/tp when tp
        # divides num_experts, more on the rank with the extra expert when not).
        self.num_experts, self.top_k = m.num_experts, m.num_experts_per_tok
        self.local_experts = facts.max_local_experts
        expert_tp = facts.expert_tensor_parallel_size
        # per expert index, summed over the MoE layers (expert_bytes covers every layer)
        self.expert_bytes_per_touch = expert_bytes / m.num_experts / expert_tp if m.is_moe else 0.0
        if facts.expert_parallel_size > 1:
            routed_flops = 2 * m.num_moe_layers * m.num_experts_per_tok * m.expert_weights
            self.linear_flops_per_token += routed_flops * (self.local_experts / m.num_experts - 1 / tp)
        if facts.hardware.data_parallel_size > 1 and facts.expert_parallel_size > 1:
            # Data parallel: a rank's routed experts serve every rank's tokens, priced once per lockstep step for
            # the group (sim/moe_group.py), so this rank's own step leaves them out.
            self.linear_flops_per_token -= (
                2 * m.num_moe_layers * m.num_experts_per_tok * m.expert_weights * (self.local_experts / m.num_experts)
            )
            self.num_experts = 0
        self.lm_head_flops_per_row = 2 * m.hidden_size * m.vocab_size / tp
        self.lm_head_bytes = m.hidden_size * m.vocab_size * dtype_bytes / tp
        heads_per_layer = m.num_attention_heads / tp
        if m.is_mla:
            # vLLM's MLA: prefill attends with K/V expanded from the latent (QK over qk_nope + qk_rope, PV over
            # v_head_dim); decode absorbs kv_b into q and o and attends over the latent itself (QK over
            # kv_lora_rank + qk_rope, PV over kv_lora_rank), ~3.4x the flops per pair for DeepSeek-V3. A step
            # made of decode rows (one token, or 1 + k verifying drafts) is priced as decode, any other as prefill.
            prefill_dims = 2 * (m.qk_nope_head_dim + m.qk_rope_head_dim) + 2 * m.v_head_dim
            decode_dims = 2 * (m.kv_lora_rank + m.qk_rope_head_dim) + 2 * m.kv_lora_rank
            self.attention_flops_per_pair = prefill_dims * heads_per_layer * m.num_hidden_layers
            self.mla_decode_extra_flops_per_pair = (decode_dims - prefill_dims) * heads_per_layer * m.num_hidden_layers
        else:
            self.attention_flops_per_pair = 4 * m.head_dim * heads_per_layer * m.num_hidden_layers
            self.mla_decode_extra_flops_per_pair = 0.0
        per_layer = facts.kv_bytes_per_token_per_layer
        self.kv_bytes_per_token = per_layer * m.num_hidden_layers  # what a step reads and writes per token
        # The same at the fitted rates: attention's compute seconds per (query, key) pair, memory seconds per
        # K/V token (a decode window prices a step with two operations fewer than from flops and bytes).
        # GPU kernels' facts (LLMServingSim's profiles): the host as device runs torch's attention, none of these.
        on_gpu = facts.hardware.gpu.name not in HOST_DEVICES
        attention_flops_per_s = self.flops_per_s * (c.attention_flops_ratio if on_gpu else 1.0)
        self.attention_s_per_pair = self.attention_flops_per_pair / attention_flops_per_s
        self.mla_decode_extra_s_per_pair = self.mla_decode_extra_flops_per_pair / attention_flops_per_s
        self.mixed_factor = c.mixed_step_attention_factor if on_gpu else 1.0
        self.kv_s_per_token = self.kv_bytes_per_token / self.bytes_per_s
        # Sliding-window layers attend to at most `window` keys per query and read at most `window` tokens per
        # row. The step gives only totals, so a sliding layer's share is bounded by them: pairs by
        # min(pairs, tokens x window), reads by min(context, rows x window), an upper bound (exact once every
        # row's context exceeds the window).
        self.window = m.sliding_window or 0
        self.sliding_fraction = m.num_sliding_layers / m.num_hidden_layers
        # A decode row's (query, key) pairs are its context: when a pair's compute costs no more than reading a
        # K/V token, every decode step's attention is its memory side (float products are monotone, so the max
        # picks it to the last bit), which a decode window then prices alone (two numpy calls fewer).
        decode_s_per_pair = self.attention_s_per_pair + self.mla_decode_extra_s_per_pair
        self.decode_memory_bound = not self.window and decode_s_per_pair <= self.kv_s_per_token
        # The elementwise kernels' activation traffic, per token, at the fitted bandwidth (separate kernels:
        # added, not combined with the GEMMs' roofline).
        if m.is_mla:  # rotary on the rope part of every q head and on the one shared rope key
            qk_width = (heads_per_layer + 1) * m.qk_rope_head_dim
        else:
            qk_width = (m.num_attention_heads + m.num_key_value_heads) * m.head_dim / tp
        mlp_width = (
            m.num_dense_mlp_layers * m.intermediate_size
            + m.num_moe_layers * (m.num_experts_per_tok * m.moe_intermediate_size + m.shared_expert_intermediate_size)
        ) / (m.num_hidden_layers * tp)  # the MoE layers: the top-k experts' (and shared experts') widths
        elements = elementwise_elements_per_token(m.hidden_size, qk_width, mlp_width, 4 if m.post_norms else 2)
        self.elementwise_s_per_token = m.num_hidden_layers * elements * dtype_bytes / self.bytes_per_s
        self.allreduce_s_per_token = 0.0
        self.allreduce_fixed_s = 0.0
        if tp > 1:
            link = (facts.gpu.interconnect_bandwidth_gbps or 0) * 1e9 * c.interconnect_efficiency
            if link <= 0:
                raise ValueError(f"tensor parallel {tp} needs hardware.gpu.interconnect_bandwidth_gbps")
            # After attention and after the MLP. Expert parallel does not change this: without data parallel
            # every rank already holds every token, computes its own experts' share and the MoE output is
            # all-reduced as before; vLLM's all-to-all dispatch/combine kernels run only with dp_size > 1
            # (`FusedMoEParallelConfig.use_all2all_kernels`), which the planner does not model.
            calls = 2 * m.num_hidden_layers
            ring_bytes_per_token = 2 * (tp - 1) / tp * m.hidden_size * dtype_bytes
            self.allreduce_s_per_token = calls * ring_bytes_per_token / link
            self.allreduce_fixed_s = calls * c.allreduce_latency_s
            self.launch_s += calls * c.allreduce_launch_wait_s  # paid where launches are, gone under graphs
        self._other_s_by_rows: dict[int, float] = {}  # decode_window_s's other terms' sum, by number of rows
        self._other_s_table = np.empty(0)  # the same, indexed by number of rows from 0: for arrays of rows
        # Every term grows with the step, so if the largest step the engine schedules (its token and row budgets,
        # every row at the longest context) takes a finite time, every step does: checked once, not per step.
        tokens, rows = facts.engine.max_num_batched_tokens, facts.engine.max_num_seqs
        context = facts.max_model_len
        full_s = self.step_time_s(tokens, rows, rows, tokens * context, rows * context, True, rows)
        if not math.isfinite(full_s):
            self._refuse(f"a step of {tokens} tokens in {rows} rows at {context} context takes {full_s} s")

    def _refuse(self, what: str) -> None:
        gpu = self.facts.gpu
        coefficients = ", ".join(f"{k} {v:g}" for k, v in self.coefficients.to_dict().items())  # the calibrated ones
        raise StepTimeError(
            f"the cost model has no finite step time: {what} (GPU {gpu.name}: bf16_tflops {gpu.bf16_tflops:g},"
            f" memory_bandwidth_gbps {gpu.memory_bandwidth_gbps:g}; coefficients: {coefficients}); every step must"
            " take a finite time: give the GPU's spec and the calibration's coefficients within a real device's range"
        )

    def linear_step_bytes(self, num_tokens):
        """Weight bytes a step of num_tokens tokens reads (one GPU): the dense part, and for a mixture of
        experts the expected distinct experts its tokens touch in every MoE layer."""
        if not self.num_experts:
            return self.linear_bytes
        return self.linear_bytes + self.expert_bytes_per_touch * expected_local_experts_touched(
            num_tokens, self.num_experts, self.top_k, self.local_experts
        )

    def _gemm(self, flops, nbytes, flops_per_s=None):
        """The linear layers and the LM head: `gemm_s` of their compute and memory times."""
        return gemm_s(flops / (flops_per_s or self.flops_per_s), nbytes / self.bytes_per_s)

    def device_s(self, num_tokens, num_seqs, num_sampled, attention_pairs, sum_context_tokens):
        """The device's seconds for a step: the rooflines, the all-reduces and the launches it waits for."""
        other = self._other_terms_s(num_tokens, num_seqs, num_sampled)
        # The attention added last, to the other terms' sum: a decode window adds it to that sum computed once
        # per number of rows, so a step priced in a window and alone is the same float to the last bit.
        return self._attention_s(num_tokens, num_seqs, attention_pairs, sum_context_tokens) + other

    def decode_window_s(self, num_rows: int | np.ndarray, sum_context_tokens: np.ndarray, host_s):
        """(device seconds, step seconds) of steps of one-token rows, num_rows of them (one count for every step,
        or each step's, never growing: a window in which requests finish), whose contexts sum to
        sum_context_tokens (one per step): what device_s and combine give (the same operations, so the same
        bits), with the terms that depend on the rows alone summed once per number of rows, as plain floats."""
        if self.decode_memory_bound:
            device = (sum_context_tokens + num_rows) * self.kv_s_per_token  # _attention_s's memory side
        else:
            device = self._attention_s(num_rows, num_rows, sum_context_tokens, sum_context_tokens)
        if isinstance(num_rows, np.ndarray):
            most = int(num_rows[0])  # rows only shrink in a window
            table = self._other_s_table
            if most >= len(table):
                grown = [self._decode_other_s(n) for n in range(len(table), most + 1)]
                table = self._other_s_table = np.concatenate((table, grown))
            device += table[num_rows]
        else:
            device += self._decode_other_s(num_rows)
        return device, self.combine(host_s, device)

    def _decode_other_s(self, num_rows: int) -> float:
        """_other_terms_s of a decode step of num_rows rows (one token each), computed once per number."""
        other_s = self._other_s_by_rows.get(num_rows)
        if other_s is None:
            other_s = self._other_s_by_rows[num_rows] = self._other_terms_s(num_rows, num_rows, num_rows)
        return other_s

    def _other_terms_s(self, num_tokens, num_seqs, num_sampled):
        """device_s's terms but the attention, summed in this order (float sums in another order differ in their
        last bits): the linear layers and the LM head, the elementwise kernels, the all-reduces, the kernels' floor,
        the launches, the per-row overhead."""
        linear = self._gemm(
            num_tokens * self.linear_flops_per_token, self.linear_step_bytes(num_tokens), self.linear_flops_per_s
        )
        lm_head = self._gemm(num_sampled * self.lm_head_flops_per_row, (num_sampled > 0) * self.lm_head_bytes)
        allreduce = num_tokens * self.allreduce_s_per_token + self.allreduce_fixed_s
        elementwise = num_tokens * self.elementwise_s_per_token
        # A uniform decode batch (decode_query_len tokens per row) up to the capture size replays a full CUDA graph
        # (vLLM's default cudagraph_mode FULL_AND_PIECEWISE); other steps pay every launch (piecewise
        # graphs' savings on mixed steps are not modelled: conservative).
        graphed = (num_tokens == num_seqs * self.decode_query_len) & (num_tokens <= self.capture_size)
        return (
            linear
            + lm_head
            + elementwise
            + allreduce
            + self.kernel_floor_s
            + self.attention_floor_s
            + (1 - graphed) * self.launch_s
            + num_seqs * self.row_s
        )

    def _attention_s(self, num_tokens, num_seqs, attention_pairs, sum_context_tokens):
        """Attention's roofline: its (query, key) pairs' compute against its K/V reads and writes (the max of
        the two: no data on their ridge; GEMMs use `_gemm`)."""
        s_per_pair = self.attention_s_per_pair
        if self.mla_decode_extra_s_per_pair:
            s_per_pair = (
                s_per_pair + (num_tokens <= num_seqs * self.decode_query_len) * self.mla_decode_extra_s_per_pair
            )
        context = sum_context_tokens
        if self.window:  # the sliding layers' share attends over the window only
            f = self.sliding_fraction
            attention_pairs = (1 - f) * attention_pairs + f * _minimum(attention_pairs, num_tokens * self.window)
            context = (1 - f) * context + f * _minimum(context, num_seqs * self.window)
        compute_s, memory_s = attention_pairs * s_per_pair, (context + num_tokens) * self.kv_s_per_token
        # A prefill chunk among other rows (more tokens than rows, more than one row): the varlen prefill kernel
        # takes every row (mixed_step_attention_factor). Pure decode steps never get here with rows > tokens; nor
        # do verify rows of up to decode_query_len tokens (vLLM's reorder_batch_threshold keeps them decodes).
        mixed = (num_tokens > num_seqs * self.decode_query_len) & (num_seqs > 1)
        if isinstance(compute_s, np.ndarray) or isinstance(memory_s, np.ndarray):
            return np.maximum(compute_s, memory_s * np.where(mixed, self.mixed_factor, 1.0))
        return max(compute_s, memory_s * self.mixed_factor if mixed else memory_s)  # plain floats: 10x faster

    def host_s(self, num_seqs, num_prompt_rows=0):
        """The host's seconds for a step: scheduling and input preparation, per-row work, and the rows computing
        prompt tokens' own (num_prompt_rows of the num_seqs)."""
        c = self.coefficients
        host = c.step_overhead_s + num_seqs * c.per_row_overhead_s
        return (host + num_prompt_rows * c.per_prompt_row_overhead_s) if c.per_prompt_row_overhead_s else host

    def block_step_host_s(self, num_seqs):
        """The host's seconds for a step of a multi-step block after its first (engine.num_scheduler_steps): no
        scheduling or input preparation (the block's first step did them; the inputs advance on the device), but
        each row's token still processed (its output and detokenising)."""
        return num_seqs * self.coefficients.per_row_overhead_s

    def combine(self, host_s, device_s, after_idle: bool = False):
        """A step's duration from its two sides: overlapped (async scheduling) unless serial or the first
        step after the engine was idle (nothing was scheduled ahead)."""
        if self.serial or after_idle:
            return host_s + device_s
        if isinstance(host_s, np.ndarray) or isinstance(device_s, np.ndarray):
            return np.maximum(host_s, device_s)
        return max(host_s, device_s)

    def step_time_s(
        self,
        num_tokens,
        num_seqs,
        num_sampled,
        attention_pairs,
        sum_context_tokens,
        after_idle=False,
        num_prompt_rows=0,
    ):
        """Seconds for one step; any argument but after_idle may be a numpy array of steps."""
        device = self.device_s(num_tokens, num_seqs, num_sampled, attention_pairs, sum_context_tokens)
        return self.combine(self.host_s(num_seqs, num_prompt_rows), device, after_idle)

    def floors(self, prompt_tokens: float) -> dict[str, float]:
        """What no engine can beat on this hardware, at 100% of spec peak and bandwidth:
        a decode step of one row reads every weight it uses once (a mixture of experts: the dense part and
        top-k experts); a prefill also does 2 flops per weight per prompt token, the linear layers at their own
        peak (fp8 weights: the fp8 rate), the LM head at the dtype's."""
        weights = self.linear_step_bytes(1) + self.lm_head_bytes
        bw = self.facts.gpu.memory_bandwidth_gbps * 1e9
        prefill_s = prompt_tokens * self.linear_flops_per_token / linear_peak_flops(self.facts)
        prefill_s += self.lm_head_flops_per_row / peak_flops(self.facts)
        return {
            "tpot_floor_ms": weights / bw * 1e3,
            "ttft_floor_ms": max(weights / bw, prefill_s) * 1e3,
            "prompt_tokens": prompt_tokens,
        }
