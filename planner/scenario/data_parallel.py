"""The rules of data parallel with expert parallel (`hardware.data_parallel_size`, the node topology, the
all-to-all backend, EPLB): how they fit the GPUs, the model and the other features, one message per mistake
(`check_data_parallel`, from check_relations). What the planner does not model with data parallel is refused,
never dropped."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

from planner.errors import NO_VALUE
from sim.config import HOST_DEVICES, Scenario

TOPOLOGY_KEYS = ("gpus_per_node", "num_nodes", "nvlink_domain_gpus", "internode_gbit_per_s")
GPU_TOPOLOGY_KEYS = ("gpus_per_node", "nvlink_domain_gpus", "internode_gbit_per_s")  # the catalog's node
DBO_KEYS = ("enable_dbo", "dbo_decode_token_threshold", "dbo_prefill_token_threshold")  # vLLM's dual-batch overlap
GROUP_ENGINE_KEYS = (
    "all2all_backend", "enable_eplb", "eplb_num_redundant_experts", "expert_load_balancedness", *DBO_KEYS
)  # fmt: skip
DBO_BACKENDS = ("deepep_low_latency", "deepep_high_throughput")  # vLLM's VllmConfig refuses DBO with the others

Fail = Callable[[str, Any, str], typing.NoReturn]


def drop_data_parallel_keys(hardware: dict, engine: dict) -> None:
    """Without data parallel its keys say nothing of the run: a summary keeps the keys it always had."""
    for key in ("data_parallel_size", *TOPOLOGY_KEYS):
        del hardware[key]
    for key in GPU_TOPOLOGY_KEYS:
        del hardware["gpu"][key]
    for key in GROUP_ENGINE_KEYS:
        del engine[key]


def check_data_parallel(s: Scenario, raw: dict, fail: Fail) -> Scenario:
    """The data-parallel keys against the GPUs, the model and the engine's other settings; the scenario with the
    topology the hardware leaves out taken from its GPU's node (gpus_per_node, nvlink_domain_gpus,
    internode_gbit_per_s), the NVLink domain at most the group's GPUs."""
    hw, m = s.hardware, s.model
    dp, tp = hw.data_parallel_size, hw.tensor_parallel_size
    given_hw, given_engine = raw.get("hardware") or {}, raw.get("engine") or {}
    if dp == 1:
        for key in TOPOLOGY_KEYS:
            if key in given_hw:
                fail(
                    f"hardware.{key}", given_hw[key],
                    "describes where a data-parallel group's ranks sit; it is used only with"
                    " hardware.data_parallel_size > 1 (a tensor-parallel engine's GPUs share one node)",
                )  # fmt: skip
    group = dp > 1 and hw.expert_parallel
    for key in GROUP_ENGINE_KEYS:
        if key in given_engine and not group:
            fail(
                f"engine.{key}", given_engine[key],
                "is for expert parallel across data-parallel ranks (vLLM's all-to-all, EPLB and dual-batch overlap"
                " run only there):"
                " it needs hardware.data_parallel_size > 1 and hardware.expert_parallel true",
            )  # fmt: skip
    if dp > 1 and "router" in given_hw:
        fail(
            "hardware.router", given_hw["router"],
            "a data-parallel group's requests go through vLLM's DP balancer (the rank with the fewest 4 x waiting +"
            " running); leave router out",
        )  # fmt: skip
    if dp > 1:
        _check_unmodelled(s, fail)
        s = _with_node_defaults(s, fail)
        _check_topology(s, fail)
    if group:
        _check_eplb(s, fail)
        _check_dbo(s, given_engine, fail)
    if dp > 1 and m.num_moe_layers and not hw.expert_parallel:
        fail(
            "hardware.expert_parallel", False,
            f"{m.name} is a mixture of experts: with data_parallel_size {dp} vLLM then shards every expert over all"
            f" {dp * tp} GPUs and gathers every token, which the planner does not model; set expert_parallel true",
        )  # fmt: skip
    return s


def _with_node_defaults(s: Scenario, fail: Fail) -> Scenario:
    """The hardware's topology, what it leaves out from its GPU's node; a domain given larger than the group's
    GPUs is refused, the GPU's own (a rack's 72) is cut to them."""
    hw, gpu = s.hardware, s.hardware.gpu
    per_node = hw.gpus_per_node or gpu.gpus_per_node
    span = hw.num_nodes * per_node if per_node is not None else hw.num_gpus
    domain = hw.nvlink_domain_gpus
    if domain is not None and domain > span:
        fail(
            "hardware.nvlink_domain_gpus", domain,
            f"must be <= the {span} GPUs of the group's {hw.num_nodes} node(s): the domain counts the group's own"
            f" GPUs (a group inside a larger NVLink rack, such as a GB200 NVL72: {span})",
        )  # fmt: skip
    if domain is None and gpu.nvlink_domain_gpus is not None:
        domain = min(gpu.nvlink_domain_gpus, span)
    hardware = dataclasses.replace(
        hw,
        gpus_per_node=per_node,
        nvlink_domain_gpus=domain,
        internode_gbit_per_s=hw.internode_gbit_per_s or gpu.internode_gbit_per_s,
    )
    return dataclasses.replace(s, hardware=hardware)


def _check_unmodelled(s: Scenario, fail: Fail) -> None:
    """Settings a data-parallel group does not run in the planner: refused, never dropped."""
    hw, eng = s.hardware, s.engine
    if hw.replicas > 1:
        fail(
            "hardware.replicas", hw.replicas,
            "copies of a data-parallel group are a fleet pool's replicas (fleet.pools.NAME.hardware.replicas:"
            " docs/disaggregation.md); here give more ranks as data_parallel_size; allowed: 1",
        )  # fmt: skip
    if eng.num_scheduler_steps != 1:
        fail(
            "engine.num_scheduler_steps", eng.num_scheduler_steps,
            "multi-step scheduling (vLLM V0) has no data-parallel lockstep (vLLM's V1 engine); allowed: 1",
        )  # fmt: skip
    if eng.scheduler != "continuous":
        fail(
            "engine.scheduler", eng.scheduler,
            "data parallel is modelled for vLLM's continuous batching; allowed: continuous",
        )  # fmt: skip


def _check_topology(s: Scenario, fail: Fail) -> None:
    """The ranks' GPUs fill the nodes; the NVLink domain fits in them; the network is given where it is crossed."""
    hw, gpus = s.hardware, s.hardware.num_gpus
    per_node, nodes = hw.gpus_per_node, hw.num_nodes
    if per_node is None and nodes > 1:
        fail("hardware.gpus_per_node", NO_VALUE, f"missing; num_nodes {nodes} needs the GPUs of each node")
    if per_node is not None:
        if hw.tensor_parallel_size > per_node:
            fail(
                "hardware.tensor_parallel_size", hw.tensor_parallel_size,
                f"must be <= gpus_per_node ({per_node}): a rank's tensor-parallel group spans one node here",
            )  # fmt: skip
        if (nodes > 1 and gpus != nodes * per_node) or gpus > nodes * per_node:
            fail(
                "hardware.data_parallel_size", hw.data_parallel_size,
                f"makes {gpus} GPUs at tensor_parallel_size {hw.tensor_parallel_size}, which must fill the"
                f" {nodes} node(s) of {per_node} GPUs ({nodes * per_node}): vLLM runs the same number of ranks on"
                " every node (--data-parallel-size-local); on one node, at most its GPUs",
            )  # fmt: skip
    domain = hw.nvlink_domain_gpus
    if domain is not None and per_node is not None and domain % per_node and per_node % domain:
        fail(
            "hardware.nvlink_domain_gpus", domain,
            f"must divide gpus_per_node ({per_node}) or be a multiple of it: a domain is part of a node or whole nodes",
        )  # fmt: skip
    within = min(domain or per_node or gpus, gpus)
    if s.hardware.expert_parallel and within < gpus and hw.internode_gbit_per_s is None:
        fail(
            "hardware.internode_gbit_per_s", NO_VALUE,
            f"missing; the {gpus} expert-parallel GPUs span NVLink domains of {within}, so the all-to-all crosses"
            " the network: give its Gb/s per GPU, one direction (400 for a ConnectX-7 NDR NIC per GPU)",
        )  # fmt: skip
    on_host = hw.gpu.name in HOST_DEVICES  # the ranks copy in the host's memory (sim/moe_group.py)
    if s.hardware.expert_parallel and within > 1 and hw.gpu.interconnect_bandwidth_gbps is None and not on_host:
        fail(
            "hardware.gpu.interconnect_bandwidth_gbps", NO_VALUE,
            "missing; the all-to-all between GPUs of one NVLink domain moves at it (GB/s per GPU, one direction)",
        )  # fmt: skip


def _check_eplb(s: Scenario, fail: Fail) -> None:
    """EPLB's redundant experts, as vLLM and DeepSeek's EPLB algorithm take them."""
    eng, m, gpus = s.engine, s.model, s.hardware.num_gpus
    redundant = eng.eplb_num_redundant_experts
    if redundant and not eng.enable_eplb:  # vLLM's ParallelConfig refuses this too
        fail("engine.eplb_num_redundant_experts", redundant, "needs engine.enable_eplb true (vLLM refuses it without)")
    slots = m.num_experts * (gpus - 1)
    if redundant > slots:
        fail(
            "engine.eplb_num_redundant_experts", redundant,
            f"must be <= {slots}: {m.num_experts} experts can each be copied onto at most the other {gpus - 1}"
            " GPUs (one copy of an expert per GPU)",
        )  # fmt: skip
    if eng.enable_eplb and (m.num_experts + redundant) % gpus:
        fail(
            "engine.eplb_num_redundant_experts", redundant,
            f"with {m.num_experts} experts, the physical experts ({m.num_experts} + {redundant}) must divide evenly"
            f" over the {gpus} GPUs (DeepSeek's EPLB algorithm, which vLLM runs, places the same number on each)",
        )  # fmt: skip


def _check_dbo(s: Scenario, given_engine: dict, fail: Fail) -> None:
    """Dual-batch overlap (sim/dual_batch.py) as vLLM runs it: DeepEP's kernels only, thresholds only with it on."""
    eng = s.engine
    if eng.enable_dbo and eng.speculative is not None:
        fail(
            "engine.enable_dbo", True,
            "dual-batch overlap of steps that verify drafts is not modelled (the drafter's passes after each"
            " micro-batch's forward); set it false to simulate speculative decoding in the data-parallel group",
        )  # fmt: skip
    if eng.enable_dbo and eng.all2all_backend not in DBO_BACKENDS:
        fail(
            "engine.all2all_backend", eng.all2all_backend,
            "engine.enable_dbo overlaps DeepEP's kernels only (vLLM refuses micro-batching with the others);"
            f" allowed with it: {', '.join(DBO_BACKENDS)}",
        )  # fmt: skip
    for key in DBO_KEYS[1:]:
        if key in given_engine and not eng.enable_dbo:
            fail(
                f"engine.{key}",
                given_engine[key],
                "is a threshold of dual-batch overlap: it needs engine.enable_dbo true",
            )
