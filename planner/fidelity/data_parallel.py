"""Data parallel with expert parallel against public measurements: `python -m planner.fidelity.data_parallel` prints
the tables docs/data-parallel-expert-parallel.md includes.

The measurements were listed here, with their settings, before anything was simulated against them; nothing in the
all-to-all's form or its constants (sim/moe_group.py) was changed after seeing the errors. Only DeepEP's kernel
benchmark is a setting the planner prices as measured (one dispatch or combine call). The deployments' prefill
figures are simulated as prefill/decode fleets of DP + EP groups (planner/fidelity/dp_fleet.py, from the settings
listed here, its assumptions beside them); the other end-to-end figures are listed with what keeps them from a
like-for-like simulation.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from planner.catalog import catalog_gpu, catalog_model
from planner.fidelity.dp_fleet import deployment_figures, deployment_figures_table
from planner.fidelity.markdown import table
from sim.config import EngineConfig, HardwareConfig
from sim.cost_model import CostModel
from sim.engine_facts import EngineFacts
from sim.moe_group import MoeGroupCost, expected_max_share

DEEPEP = "DeepEP README (deepseek-ai/DeepEP), low-latency kernels"
# DeepEP's setting: H800 GPUs (the H100's die, NVLink cut to 400 GB/s both ways: 200 one way), 8 per node, one
# ConnectX-7 400 Gb/s InfiniBand NIC each; 128 tokens per GPU, hidden 7168, top-8 (DeepSeek-V3), fp8 dispatch, bf16
# combine; latency per call, microseconds, by expert-parallel size (the README's table after its NVLink update).
DEEPEP_TOKENS_PER_GPU = 128
DEEPEP_US = {  # EP size -> (dispatch us, combine us)
    8: (77, 114),
    16: (118, 195),
    32: (155, 273),
    64: (173, 314),
    128: (192, 369),
    256: (194, 360),
}


@dataclass(frozen=True)
class Deployment:
    """A published end-to-end figure of DP + EP serving, with its settings, and why it is not simulated."""

    source: str
    setting: str
    figure: str
    not_simulated: str


DEPLOYMENTS = [
    Deployment(
        "DeepSeek, inference system overview (open-source week day 6, 2025)",
        "DeepSeek-V3/R1 on H800 nodes; prefill EP32 / DP32 over 4 nodes, decode EP144 / DP144 over 18 nodes, 32"
        " redundant experts in each; two micro-batches overlapped; 56.3% of input tokens from the KV cache",
        "73.7k input tokens/s per node prefilling, 14.8k output tokens/s per node decoding",
        "simulated below",
    ),
    Deployment(
        "LMSYS / SGLang, large-scale EP on 96 H100s (blog, 2025-05-05)",
        "DeepSeek-V3 on 12 nodes of 8 H100s, prefill and decode disaggregated, DeepEP, EPLB, two-batch overlap;"
        " 2,000-token inputs",
        "52.3k input and 22.3k output tokens/s per node; TTFT 2-5 s, ITL about 100 ms",
        "simulated below; TTFT and ITL are the deployment's traffic's, which no source states",
    ),
    Deployment(
        "vLLM blog, DeepSeek @ 2.2k tok/s/H200 with wide-EP (2025-12-17)",
        "DeepSeek-R1 on a CoreWeave H200 cluster, InfiniBand ConnectX-7; wide-EP (DP + EP), disaggregated, dual-batch"
        " overlap, DeepEP, EPLB",
        "2.2k tokens/s per H200 sustained (about 1.5k before its latest kernels)",
        "the post does not give the batch or the DP sizes of the figure",
    ),
    Deployment(
        "llm-d, wide expert parallelism well-lit path (guide)",
        "DeepSeek-R1-0528, one DP16 prefill worker and one DP16 decode worker (32 H200 or B200), NIXL, DeepEP",
        "a validated deployment recipe; no throughput figure on the guide page",
        "no figure to compare with",
    ),
]


def h800() -> object:
    """The H800 SXM: the H100 SXM's figures, NVLink at 400 GB/s both ways (200 one way)."""
    return dataclasses.replace(catalog_gpu("h100-sxm"), name="h800", interconnect_bandwidth_gbps=200.0)


def deepep_calls_us(ep: int) -> tuple[float, float]:
    """The planner's (dispatch, combine) microseconds per call in DeepEP's low-latency benchmark setting."""
    model = catalog_model("deepseek-v3")
    hardware = HardwareConfig(
        h800(), 1, data_parallel_size=ep, expert_parallel=True, gpus_per_node=8, num_nodes=max(1, ep // 8),
        nvlink_domain_gpus=min(8, ep), internode_gbit_per_s=400.0,
    )  # fmt: skip
    engine = EngineConfig(all2all_backend="deepep_low_latency", max_model_len=4096)
    moe = MoeGroupCost(CostModel(EngineFacts.derive(model, "bfloat16", hardware, engine)))
    tokens = DEEPEP_TOKENS_PER_GPU
    busiest = expected_max_share(tokens * model.num_experts_per_tok * ep, ep)
    dispatch_s, combine_s = moe.layer_calls_s(tokens, tokens * ep, busiest)
    return dispatch_s * 1e6, combine_s * 1e6


def _error(predicted: float, measured: float) -> str:
    return f"{round(100 * (predicted - measured) / measured):+d}%"


def kernel_table() -> str:
    rows = []
    for ep, (dispatch, combine) in DEEPEP_US.items():
        d, c = deepep_calls_us(ep)
        rows.append(
            [str(ep), str(dispatch), f"{d:.0f}", _error(d, dispatch), str(combine), f"{c:.0f}", _error(c, combine)]
        )
    head = ["EP", "dispatch us", "planner", "error", "combine us", "planner", "error"]
    return "\n".join(table(head, rows))


def deployment_table() -> str:
    rows = [[d.source, d.setting, d.figure, d.not_simulated] for d in DEPLOYMENTS]
    return "\n".join(table(["source", "setting", "figure", "not simulated because"], rows))


def render() -> str:
    """DeepEP's kernel table, the deployments listed, and the deployments simulated as fleets."""
    return "\n".join(
        [
            f"{DEEPEP}: one call's latency, {DEEPEP_TOKENS_PER_GPU} tokens per GPU, DeepSeek-V3, H800 + 400 Gb/s",
            kernel_table(),
            "",
            deployment_table(),
            "",
            "Simulated as fleets of a prefill and a decode DP + EP group (planner/fidelity/dp_fleet.py):",
            deployment_figures_table(deployment_figures(h800(), catalog_gpu("h100-sxm"))),
        ]
    )


def tracked() -> dict[str, float]:
    """The fidelity gate's figures (planner/fidelity/gate.py): each DeepEP call's and each deployment figure's
    absolute error."""
    out = {}
    for ep, (dispatch, combine) in DEEPEP_US.items():
        d, c = deepep_calls_us(ep)
        out[f"dp.deepep.ep{ep}.dispatch.abs"] = round(abs(d / dispatch - 1), 4)
        out[f"dp.deepep.ep{ep}.combine.abs"] = round(abs(c / combine - 1), 4)
    for run, prefill, decode, _ in deployment_figures(h800(), catalog_gpu("h100-sxm")):
        name = f"dp.fleet.{run.gpu.name}.p{run.prefill[0]}.d{run.decode[0]}"
        out[name + ".prefill_per_node.abs"] = round(abs(prefill / run.prefill_per_node - 1), 4)
        out[name + ".decode_per_node.abs"] = round(abs(decode / run.decode_per_node - 1), 4)
    return out


def section() -> list[str]:
    """docs/fidelity.md's section: the tables, and where they are read."""
    return [
        "## Data parallel with expert parallel: public measurements",
        "",
        (
            "Listed with their settings in `planner/fidelity/data_parallel.py` before any was simulated (`python -m "
            "planner.fidelity.data_parallel` prints the tables; docs/data-parallel-expert-parallel.md says what they "
            "measure and what was assumed). The all-to-all's constants are DeepEP's stated bandwidths, not fitted to "
            "the kernel table; the deployments are spec-sheet predictions (no measured block-fp8 MoE or MLA kernel "
            "profile exists here): a positive throughput error is optimism."
        ),
        "",
        *render().split("\n"),
    ]


def main() -> None:
    print(render())


if __name__ == "__main__":
    main()
