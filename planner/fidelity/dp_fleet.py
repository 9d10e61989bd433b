"""Published per-node figures of prefill/decode-disaggregated DP + EP deployments, simulated as fleets whose pools
are data-parallel groups (sim/fleet_dp.py): `python -m planner.fidelity.data_parallel` prints them.

Each deployment's settings are the ones planner/fidelity/data_parallel.py listed before anything was simulated; what
its source does not state is an assumption written beside it, fixed before the first run.
- Prefill: throughput while prefilling. A burst of 16 prompts per prefill rank keeps the prefill group stepping
  full token budgets; its input tokens (cache hits included, as the sources count them) over the group's lockstep
  time and its nodes.
- Decode: throughput at the batch the deployment decodes at, which its traffic sets and no source states: 128
  requests per rank, DeepSeek's own profile setting for this deployment. A burst of ranks x 128 requests goes
  through enough prefill groups (FILL_GROUPS, a device of the simulation, not the deployment's ratio) that the
  decode group runs every request at once; its output tokens over the steps it ran so, per node.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.fidelity.markdown import table
from planner.scenario.load import validate_mapping
from sim.config import GpuSpec
from sim.fleet import simulate_fleet

OUTPUT_TOKENS = 4  # a reply's length: the prefill figure does not read it (the decode pool only drains the burst)
DECODE_OUTPUT_TOKENS = 32  # ... and the decode figure's replies: steps enough at the full batch, a short run
DECODE_BATCH = 128  # requests per decode rank: DeepSeek's profile-data setting for its decode deployment
FILL_GROUPS = 64  # prefill groups that prefill the decode figure's burst well within its replies' time
REDUNDANT_EXPERTS = 32  # DeepSeek's EPLB: 32 redundant experts in each of its deployments


@dataclass(frozen=True)
class DeploymentRun:
    """A deployment's per-node figures and the fleet that simulates them."""

    source: str
    gpu: GpuSpec
    prefill: tuple[int, int]  # (data-parallel ranks, nodes) of the prefill group
    decode: tuple[int, int]  # ... and of the decode group
    prompt_tokens: int
    cached_share: float  # of the input tokens, served from the prefix cache
    token_budget: int | None  # max_num_batched_tokens per rank; None: vLLM's default on the GPU
    prefill_per_node: float  # measured: input tokens/s per node while prefilling
    decode_per_node: float  # measured: output tokens/s per node while decoding
    assumptions: str  # what the source does not state, as simulated


def runs(h800: GpuSpec, h100: GpuSpec) -> list[DeploymentRun]:
    return [
        DeploymentRun(
            "DeepSeek day 6", h800, (32, 4), (144, 18), 4096, 0.563, 16384, 73_700, 14_800,
            "4,096-token prompts, 16K tokens per GPU per prefill step, 128 requests per GPU decoding (DeepSeek's"
            " profile-data settings for this deployment); the 56.3% hits as a shared prompt prefix",
        ),
        DeploymentRun(
            "LMSYS 96 H100", h100, (24, 3), (72, 9), 2000, 0.0, None, 52_300, 22_300,
            "the 12 nodes split 3 prefill (DP24 / EP24) + 9 decode (DP72 / EP72); 32 redundant"
            " experts and 128 requests per GPU decoding as DeepSeek's; vLLM's token budget; no prefix hits",
        ),
    ]  # fmt: skip


def scenario_mapping(run: DeploymentRun, num_requests: int) -> dict:
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


def prefill_per_node(run: DeploymentRun, prompts_per_rank: int = 16) -> float:
    """Input tokens/s per node of the prefill group while it steps, over a burst of prompts_per_rank per rank."""
    ranks, nodes = run.prefill
    scenario = validate_mapping(scenario_mapping(run, ranks * prompts_per_rank), run.source, Path.cwd())
    result = simulate_fleet(scenario, record_steps=False)
    prefill = result.pools[0]
    input_tokens = int(prefill.recorder.requests.view()["prompt_tokens"].sum())
    (group,) = prefill.replicas
    return input_tokens / group.group.stats.busy_s / nodes


def decode_per_node(run: DeploymentRun) -> tuple[float, int]:
    """Output tokens/s per node of the decode group over its steps with every rank at DECODE_BATCH, and how many
    such steps it ran."""
    ranks, nodes = run.decode
    num_requests = ranks * DECODE_BATCH
    data = scenario_mapping(run, num_requests)
    data["workload"]["output_tokens"]["value"] = DECODE_OUTPUT_TOKENS
    data["fleet"]["pools"]["prefill"]["hardware"]["replicas"] = FILL_GROUPS
    data["fleet"]["pools"]["decode"]["engine"]["max_num_seqs"] = DECODE_BATCH
    result = simulate_fleet(validate_mapping(data, run.source, Path.cwd()))
    rows = result.pools[1].recorder.step_rows()
    # a lockstep step is one row per rank that ran a batch, all with its start: the group's batch is their sum
    starts, step = np.unique(rows["start_s"], return_inverse=True)
    batch = np.bincount(step, rows["num_seqs"], len(starts))
    sampled = np.bincount(step, rows["num_sampled"], len(starts))
    duration_s = np.zeros(len(starts))
    duration_s[step] = rows["duration_s"]
    full = batch == num_requests
    return float(sampled[full].sum() / duration_s[full].sum() / nodes), int(full.sum())


def _error(predicted: float, measured: float) -> str:
    return f"{round(100 * (predicted - measured) / measured):+d}%"


def deployment_figures(h800: GpuSpec, h100: GpuSpec) -> list[tuple[DeploymentRun, float, float, int]]:
    """Each deployment run with its simulated prefill and decode tokens/s per node, and its decode figure's steps."""
    return [(run, prefill_per_node(run), *decode_per_node(run)) for run in runs(h800, h100)]


def deployment_figures_table(figures: list[tuple[DeploymentRun, float, float, int]]) -> str:
    rows = []
    for run, prefill, decode, num_full in figures:
        p, d = run.prefill, run.decode
        fleet = f"{run.gpu.name}: P DP{p[0]} / {p[1]} nodes, D DP{d[0]} / {d[1]} nodes"
        rows += [
            [run.source, fleet, run.assumptions, "input tok/s/node prefilling", f"{run.prefill_per_node:,.0f}",
             f"{prefill:,.0f}", _error(prefill, run.prefill_per_node)],
            ["", "", f"decode figure over the {num_full} steps at {DECODE_BATCH} requests per rank",
             "output tok/s/node decoding", f"{run.decode_per_node:,.0f}", f"{decode:,.0f}",
             _error(decode, run.decode_per_node)],
        ]  # fmt: skip
    head = ["source", "fleet", "assumed (not stated)", "figure", "measured", "simulated", "error"]
    return "\n".join(table(head, rows))
