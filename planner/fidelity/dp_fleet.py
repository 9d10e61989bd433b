"""Published prefill figures of prefill/decode-disaggregated DP + EP deployments, simulated as fleets whose pools are
data-parallel groups (sim/fleet_dp.py): `python -m planner.fidelity.data_parallel` prints them.

Each deployment's settings are the ones planner/fidelity/data_parallel.py listed before anything was simulated; what
its source does not state is an assumption written beside it, fixed before the first run. The prefill figure is
throughput while prefilling: a burst of requests keeps the prefill group stepping full token budgets, and its input
tokens (cache hits included, as the sources count them) are divided by the group's lockstep time and its nodes.

The decode figures are not simulated: a decode group's throughput depends on the batch each rank runs, which the
sources set by their traffic (DeepSeek's profile runs 128 requests per GPU); a fleet reaching it needs about
ranks x 128 requests in flight for as long as the prefill pool takes to fill them, beyond a run this module makes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from planner.fidelity.markdown import table
from planner.scenario.load import validate_mapping
from sim.config import GpuSpec
from sim.fleet import simulate_fleet

OUTPUT_TOKENS = 4  # a reply's length: the prefill figure does not read it (the decode pool only drains the burst)
REDUNDANT_EXPERTS = 32  # DeepSeek's EPLB: 32 redundant experts in each of its deployments


@dataclass(frozen=True)
class PrefillRun:
    """A deployment's prefill figure and the fleet that simulates it."""

    source: str
    gpu: GpuSpec
    prefill: tuple[int, int]  # (data-parallel ranks, nodes) of the prefill group
    decode: tuple[int, int]  # ... and of the decode group
    prompt_tokens: int
    cached_share: float  # of the input tokens, served from the prefix cache
    token_budget: int | None  # max_num_batched_tokens per rank; None: vLLM's default on the GPU
    measured_per_node: float  # input tokens/s per node while prefilling
    assumptions: str  # what the source does not state, as simulated


def runs(h800: GpuSpec, h100: GpuSpec) -> list[PrefillRun]:
    return [
        PrefillRun(
            "DeepSeek day 6", h800, (32, 4), (144, 18), 4096, 0.563, 16384, 73_700,
            "4,096-token prompts and 16K tokens per GPU per step (DeepSeek's"
            " profile-data settings for this deployment); the 56.3% hits as a shared prompt prefix",
        ),
        PrefillRun(
            "LMSYS 96 H100", h100, (24, 3), (72, 9), 2000, 0.0, None, 52_300,
            "the 12 nodes split 3 prefill (DP24 / EP24) + 9 decode (DP72 / EP72); 32 redundant"
            " experts as DeepSeek's; vLLM's token budget; no prefix hits",
        ),
    ]  # fmt: skip


def scenario_mapping(run: PrefillRun, num_requests: int) -> dict:
    """The fleet as a scenario mapping: a prefill and a decode DP + EP group, dual-batch overlap and EPLB on both."""
    gpu = {key: value for key, value in dataclasses.asdict(run.gpu).items() if value is not None}

    def pool(role: str, ranks: int, nodes: int, backend: str) -> dict:
        engine = {"all2all_backend": backend}
        if run.token_budget is not None and role == "prefill":
            engine["max_num_batched_tokens"] = run.token_budget
        hardware = {"gpu": gpu, "data_parallel_size": ranks, "expert_parallel": True, "num_nodes": nodes}
        return {"role": role, "hardware": hardware, "engine": engine}

    workload = {
        "num_requests": num_requests,
        "seed": 0,
        "arrival": {"process": "closed", "concurrency": num_requests},  # a burst: every request sent at once
        "prompt_tokens": {"dist": "fixed", "value": run.prompt_tokens},
        "output_tokens": {"dist": "fixed", "value": OUTPUT_TOKENS},
    }
    if run.cached_share:  # every request shares it: each rank computes it once, then hits
        workload["shared_prefix"] = {"tokens": round(run.cached_share * run.prompt_tokens), "group_size": num_requests}
    return {
        "model": "deepseek-v3",
        "dtype": "bfloat16",  # activations; the catalog's checkpoint holds fp8 weights
        "engine": {
            "max_model_len": 8192,
            "enable_dbo": True,
            "enable_eplb": True,
            "eplb_num_redundant_experts": REDUNDANT_EXPERTS,
        },
        "fleet": {
            "pools": {
                "prefill": pool("prefill", *run.prefill, "deepep_high_throughput"),
                "decode": pool("decode", *run.decode, "deepep_low_latency"),
            },
            "kv_transfer": {"link": "infiniband", "bandwidth_gbit_per_s": 400, "connector": "NixlConnector"},
        },
        "workload": workload,
    }


def simulated_per_node(run: PrefillRun, prompts_per_rank: int = 16) -> float:
    """Input tokens/s per node of the prefill group while it steps, over a burst of prompts_per_rank per rank."""
    ranks, nodes = run.prefill
    scenario = validate_mapping(scenario_mapping(run, ranks * prompts_per_rank), run.source, Path.cwd())
    result = simulate_fleet(scenario, record_steps=False)
    prefill = result.pools[0]
    input_tokens = int(prefill.recorder.requests.view()["prompt_tokens"].sum())
    (group,) = prefill.replicas
    return input_tokens / group.group.stats.busy_s / nodes


def _error(predicted: float, measured: float) -> str:
    return f"{round(100 * (predicted - measured) / measured):+d}%"


def prefill_table(h800: GpuSpec, h100: GpuSpec) -> str:
    rows = []
    for run in runs(h800, h100):
        simulated = simulated_per_node(run)
        p, d = run.prefill, run.decode
        rows.append([
            run.source, f"{run.gpu.name}: P DP{p[0]} / {p[1]} nodes, D DP{d[0]} / {d[1]} nodes", run.assumptions,
            f"{run.measured_per_node:,.0f}", f"{simulated:,.0f}", _error(simulated, run.measured_per_node),
        ])  # fmt: skip
    head = ["source", "fleet", "assumed (not stated)", "input tok/s/node", "simulated", "error"]
    return "\n".join(table(head, rows))
