"""Dual-batch overlap (`engine.enable_dbo`, vLLM's --enable-dbo) of a lockstep data-parallel group under expert
parallel: a step split into two micro-batches, each MoE layer's all-to-all of one hidden behind the other's compute.

When a step splits (vLLM: `coordinate_batch_across_dp`, vllm/v1/worker/dp_utils.py, with `check_ubatch_thresholds`
of vllm/v1/worker/ubatch_utils.py): every rank must ask for it, a rank asking when its batch has at least
`dbo_decode_token_threshold` tokens (a batch of decodes only) or `dbo_prefill_token_threshold` (any other), so a
rank with nothing to run (a dummy batch of one token) keeps the whole group unsplit; and the split is abandoned
when it would leave a rank's second micro-batch empty (`is_last_ubatch_empty`: half the largest rank's tokens at
least the smallest rank's). Each rank then cuts its batch at half its tokens (`maybe_create_ubatch_slices`), and
the two micro-batches take turns on the GPU: while one computes (attention, dense layers, its experts), the
other's dispatch or combine is in flight (vLLM's UBatchWrapper yields at each dispatch and combine; the
communication runs on its own stream or, for DeepEP's low-latency kernels, on the NIC with no SM: DeepEP's README,
its figure of two micro-batches whose attention and MoE hide each other's dispatch and combine; DeepSeek-V3's
decoding runs so).

The step's device time from the parts the planner already prices, each for a half batch (half of every rank's
tokens, rows, sampled rows, attention pairs and context):

- C_h: one micro-batch's compute, the slowest rank's attention and dense layers (sim/cost_model.py's device_s,
  routed experts left out) plus the busiest GPU's expert GEMMs (sim/moe_group.py, for the half step's pairs);
- A_h: one micro-batch's dispatch and combine on the busiest GPU, each call's fixed latency included.

Two micro-batches alternating over n = 2 x MoE layers segments (each layer's attention before its dispatch,
its experts before its combine), one GPU stream computing and one link communicating, finish in

    T = max(2 C_h, 2 A_h) + min(C_h, A_h) / n

the busier resource's whole work plus one segment of the other that nothing hides: the first micro-batch's first
compute before any communication exists, or the last one's last combine after all compute is done. So
max(2 C_h, 2 A_h) <= T <= 2 C_h + 2 A_h. What the overlap costs is in 2 C_h and 2 A_h: each micro-batch reads the
dense weights and the experts its pairs touch again (memory-bound decode reads them twice), pays the kernels'
fixed costs and the calls' latencies again, and at half the tokens its GEMMs sit further below the ridge; the busiest
GPU of each half is busier, relative to the mean, than the whole step's. A split step can therefore be slower
than the whole one: that is why vLLM has the thresholds; the planner reports the net.

Simplified: both micro-batches are the same size and shape (vLLM cuts by tokens, so a prefill chunk can fall in
one); the host's work is the step's own, once (scheduling is not split); vLLM pads every rank to the largest
rank's token count when it splits (and under CUDA graphs, split or not), which the planner prices in neither;
the SMs DeepEP's high-throughput kernels take from the GEMMs while overlapped (VLLM_DBO_COMM_SMS, 20 by default,
vllm/envs.py) are not taken (errs fast with deepep_high_throughput; the low-latency kernels take none).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.cost_model import CostModel
from sim.moe_group import MoeGroupCost, MoeStep


def splits(rank_tokens: list[int], decode_only: list[bool], decode_threshold: int, prefill_threshold: int) -> bool:
    """Whether a lockstep step runs as two micro-batches (module docstring): every rank at its threshold, and no
    rank's second micro-batch empty."""
    for tokens, decodes in zip(rank_tokens, decode_only, strict=True):
        if tokens < (decode_threshold if decodes else prefill_threshold):
            return False
    return max(rank_tokens) // 2 < min(rank_tokens)


def overlapped_s(compute_half_s: float, comm_half_s: float, num_moe_layers: int) -> float:
    """Two micro-batches' seconds, each computing compute_half_s and communicating comm_half_s over
    2 x num_moe_layers alternating segments (module docstring)."""
    exposed = min(compute_half_s, comm_half_s) / (2 * num_moe_layers)
    return max(2 * compute_half_s, 2 * comm_half_s) + exposed


@dataclass(frozen=True)
class DualBatchStep:
    """A step run as two micro-batches: its device seconds and what they are made of."""

    device_s: float  # the overlapped step, every rank's device time
    compute_s: float  # both micro-batches' compute (2 C_h)
    all2all_s: float  # both micro-batches' dispatch and combine (2 A_h)
    moe: MoeStep  # one micro-batch's MoE layers

    @property
    def exposed_all2all_s(self) -> float:
        """The all-to-all seconds the overlap leaves in the step: what the step lasts beyond its compute."""
        return max(0.0, self.device_s - self.compute_s)


class DualBatch:
    """Prices the steps of a lockstep group with engine.enable_dbo that split in two micro-batches."""

    def __init__(self, cost: CostModel, moe: MoeGroupCost) -> None:
        eng = cost.facts.engine
        self.cost, self.moe = cost, moe
        self.thresholds = eng.dbo_decode_token_threshold, eng.dbo_prefill_token_threshold  # (decode, prefill)

    def step(self, outs: list) -> DualBatchStep | None:
        """The step of these ranks' batches (no dummy among them) as two micro-batches, or None if it is not split."""
        tokens = [out.num_tokens for out in outs]
        decodes = [out.num_tokens == out.num_seqs for out in outs]  # vLLM's uniform_decode: one token a row
        if not splits(tokens, decodes, *self.thresholds):
            return None
        moe = self.moe.step([t / 2 for t in tokens])
        dense_s = max(
            self.cost.device_s(
                out.num_tokens / 2, out.num_seqs / 2, out.num_sampled / 2, out.attention_pairs / 2,
                out.sum_context_tokens / 2,
            )
            for out in outs
        )  # fmt: skip
        compute_half_s = dense_s + moe.experts_s
        device_s = overlapped_s(compute_half_s, moe.all2all_s, self.moe.layers)
        return DualBatchStep(device_s, 2 * compute_half_s, 2 * moe.all2all_s, moe)
