"""The mixture-of-experts layers of a data-parallel group under expert parallel: what one lockstep step's MoE layers
cost, set by the busiest GPU (sim/data_parallel.py steps the group).

With `--data-parallel-size N --enable-expert-parallel`, vLLM places the routed experts whole over all N x tp GPUs
(`FusedMoEParallelConfig.make`, vllm/model_executor/layers/fused_moe/config.py: ep_size = dp x tp) and, in every
MoE layer, dispatches each token to the GPUs of its top-k experts and combines the results back
(`use_all2all_kernels`: the all2all managers of vllm/distributed/device_communicators/all2all.py). Every GPU waits
for the slowest at each layer, so a layer costs what the busiest GPU's share costs:

- the experts' GEMMs on the GPU that receives the most (token, expert) pairs. A step's T tokens make A = T x top_k
  pairs; with a uniform router each lands on a given GPU of R with probability 1/R, so a GPU's load is
  Binomial(A, 1/R), and the expected maximum of R of them is about A/R + z_R x sqrt(A (1/R)(1 - 1/R)), z_R the
  expected maximum of R standard normals (balls into bins with m >> n balls, where the loads are nearly normal:
  Raab and Steger, "Balls into bins - a simple and tight analysis", RANDOM 1998, whose sqrt(2 ln R) is z_R's
  limit; at R = 16 it is 2.35 against z_R's 1.77, so Blom's 1958 estimate z_R = Phi^-1((R - 0.375) / (R + 0.25))
  is used, within 1% of the exact value from R = 2). A router that favours some experts adds a systematic skew: the
  traffic's balancedness b (vLLM's EPLB log: mean over max of the ranks' tokens) scales the mean share to A/(R b).
  EPLB (`enable_eplb`) rebalances and replicates experts by their measured load (vllm/distributed/eplb/, DeepSeek's
  EPLB algorithm), which the planner takes as removing that skew entirely; each step's random spread stays.
- the dispatch and combine: every (token, expert) pair not on its own GPU crosses a link; the busiest GPU sends
  its tokens' pairs and receives its load's. Dispatch moves hidden x dtype bytes per pair (fp8 plus one float32
  scale per 128 values where the backend quantises before dispatching and the experts run fp8: DeepEP's and pplx's
  fp8 dispatch of DeepSeek's block-fp8 experts), combine hidden x dtype. Pairs to GPUs of the same NVLink domain
  go over NVLink, the others over the network, both at once; each call also pays a fixed latency. Ranks on the
  host (the `cpu` device, the live engine's ranks in one process) copy in its memory instead.
  allgather_reducescatter (vLLM's default) and naive instead gather every rank's tokens on every GPU and
  reduce-scatter the outputs (ring collectives: (R - 1)/R of all tokens' hidden states each way).

Simplified: the layer's experts, dispatch and combine add up (DeepEP's two-micro-batch overlap, vLLM's
--enable-dbo, is sim/dual_batch.py's, from these parts priced for half batches);
tokens routed uniformly beyond the stated skew; a rank of tp GPUs splits its tokens over them (vLLM's
sequence-parallel MoE); DeepEP's de-duplication of a token's pairs per node is not modelled (errs slow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from sim.config import HOST_DEVICES
from sim.cost_model import CostModel, gemm_s

# vLLM's --all2all-backend choices (vllm/config/parallel.py, All2AllBackend)
ALL2ALL_BACKENDS = (
    "allgather_reducescatter",
    "naive",
    "pplx",
    "deepep_high_throughput",
    "deepep_low_latency",
    "flashinfer_all2allv",
    "mori",
)
GATHERING = ("allgather_reducescatter", "naive")  # every token to every GPU; the others send pairs to their GPUs
FP8_DISPATCH = ("pplx", "deepep_high_throughput", "deepep_low_latency")  # quantise before dispatch (fp8 experts)
FP8_SCALE_GROUP = 128  # values sharing one float32 scale in an fp8 dispatch (DeepEP, DeepSeek's 1x128 tiles)
# Fixed cost per dispatch or combine call, beyond its bytes. No public figure isolates it; these are estimates:
# the low-latency kernels (DeepEP's IBGDA kernels, pplx) launch with no host involvement, like an NCCL call's
# small-message latency (cost_model's allreduce_latency_s); DeepEP's high-throughput kernels wait on the host for
# the receive counts before they can allocate (`notify_dispatch`), a device-host round trip.
LOW_LATENCY_CALL_S = 15e-6
HOST_SYNC_CALL_S = 50e-6
LINK_EFFICIENCY = 0.86  # DeepEP's normal kernels: 43 of ~50 GB/s RDMA, 153 of H800's ~160 GB/s NVLink (README)


def expected_max_normal(n: int) -> float:
    """The expected maximum of n standard normal draws, by Blom's estimate (module docstring)."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def expected_max_share(num_pairs, num_gpus: int, balancedness: float = 1.0):
    """The expected (token, expert) pairs of the busiest of num_gpus GPUs for num_pairs pairs (module docstring):
    mean / balancedness + z_R standard deviations, at most every pair."""
    if num_gpus == 1:
        return num_pairs
    p = 1.0 / num_gpus
    spread = expected_max_normal(num_gpus) * math.sqrt(num_pairs * p * (1.0 - p))
    return min(num_pairs, num_pairs * p / balancedness + spread)


@dataclass(frozen=True)
class MoeStep:
    """One lockstep step's MoE layers, all of them: seconds and what set them."""

    experts_s: float  # the busiest GPU's expert GEMMs
    all2all_s: float  # dispatch and combine, latency included
    imbalance: float  # the busiest GPU's pairs over the mean GPU's

    @property
    def total_s(self) -> float:
        return self.experts_s + self.all2all_s


class MoeGroupCost:
    """Prices a data-parallel group's MoE layers per step from its ranks' token counts."""

    def __init__(self, cost: CostModel) -> None:
        facts = cost.facts
        m, hw, eng = facts.model, facts.hardware, facts.engine
        self.num_gpus = hw.num_gpus
        self.tp = hw.tensor_parallel_size
        self.top_k = m.num_experts_per_tok
        self.layers = m.num_moe_layers
        self.local_experts = facts.max_local_experts
        self.balancedness = 1.0 if eng.enable_eplb else (eng.expert_load_balancedness or 1.0)
        self.flops_per_pair = 2 * m.expert_weights * self.layers
        self.bytes_per_expert = cost.expert_bytes_per_touch  # every MoE layer's copy of one expert
        self.flops_per_s, self.bytes_per_s = cost.linear_flops_per_s, cost.bytes_per_s
        self.backend = eng.all2all_backend
        dtype_bytes = facts.dtype_bytes
        fp8 = self.backend in FP8_DISPATCH and m.quant_method == "fp8"
        self.dispatch_bytes = m.hidden_size * (1 + 4 / FP8_SCALE_GROUP) if fp8 else m.hidden_size * dtype_bytes
        self.combine_bytes = m.hidden_size * dtype_bytes
        # The share of another GPU's pairs that stay in this GPU's NVLink domain, and the links' rates
        domain = min(hw.nvlink_domain_gpus or hw.gpus_per_node or self.num_gpus, self.num_gpus)
        others = max(self.num_gpus - 1, 1)
        self.nvlink_share = (domain - 1) / others
        self.network_share = (self.num_gpus - domain) / others
        self.nvlink_bytes_per_s = (facts.gpu.interconnect_bandwidth_gbps or 0) * 1e9 * LINK_EFFICIENCY
        if facts.gpu.name in HOST_DEVICES:  # ranks in one process: a dispatch is a copy in the host's memory
            self.nvlink_bytes_per_s = cost.bytes_per_s
        self.network_bytes_per_s = (hw.internode_gbit_per_s or 0) / 8 * 1e9 * LINK_EFFICIENCY
        self.call_s = {"deepep_high_throughput": HOST_SYNC_CALL_S}.get(self.backend, LOW_LATENCY_CALL_S)

    def step(self, rank_tokens: list[int]) -> MoeStep:
        """The MoE layers of a step whose ranks run these token counts (a dummy batch: 1)."""
        gpu_tokens = [t / self.tp for t in rank_tokens]
        pairs = sum(gpu_tokens) * self.top_k
        busiest = expected_max_share(pairs, self.num_gpus, self.balancedness)
        touched = self.local_experts * (1.0 - (1.0 - 1.0 / self.local_experts) ** busiest)
        experts_s = self.layers and gemm_s(
            busiest * self.flops_per_pair / self.flops_per_s, touched * self.bytes_per_expert / self.bytes_per_s
        )
        mean = pairs / self.num_gpus
        return MoeStep(experts_s, self._all2all_s(max(gpu_tokens), sum(gpu_tokens), busiest), busiest / mean)

    def _all2all_s(self, most_tokens: float, all_tokens: float, busiest_pairs: float) -> float:
        """Every MoE layer's dispatch and combine on the busiest GPU."""
        return self.layers * sum(self.layer_calls_s(most_tokens, all_tokens, busiest_pairs))

    def layer_calls_s(self, most_tokens: float, all_tokens: float, busiest_pairs: float) -> tuple[float, float]:
        """One MoE layer's (dispatch, combine) seconds on the busiest GPU, each call's latency included: most_tokens
        the most a GPU sends, all_tokens every GPU's, busiest_pairs the most (token, expert) pairs one receives."""
        remote = (self.num_gpus - 1) / self.num_gpus
        if self.backend in GATHERING:  # ring all-gather, then reduce-scatter, of every token's hidden state
            dispatch = combine = remote * all_tokens * self.combine_bytes
        else:  # its tokens' pairs out and its load's pairs in, whichever is more
            pairs = max(most_tokens * self.top_k, busiest_pairs) * remote
            dispatch, combine = pairs * self.dispatch_bytes, pairs * self.combine_bytes
        return self._link_s(dispatch) + self.call_s, self._link_s(combine) + self.call_s

    def _link_s(self, nbytes: float) -> float:
        """Seconds to move nbytes spread over the other GPUs: NVLink and the network at once."""
        nvlink = nbytes * self.nvlink_share / self.nvlink_bytes_per_s if self.nvlink_share else 0.0
        network = nbytes * self.network_share / self.network_bytes_per_s if self.network_share else 0.0
        return max(nvlink, network)
