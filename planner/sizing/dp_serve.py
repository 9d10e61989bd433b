"""The `vllm serve` flags of a data-parallel deployment (docs/data-parallel-expert-parallel.md), as vLLM's
data-parallel deployment guide writes them: the group's size, how many ranks each node runs and where the head
node listens, the all-to-all backend, dual-batch overlap and EPLB."""

from __future__ import annotations

import json

from sim.config import EngineConfig, Scenario

RPC_PORT = 13345  # any free port; the one vLLM's data-parallel deployment guide uses


def data_parallel_flags(s: Scenario) -> list[str]:
    """The flags after --tensor-parallel-size; none without data parallel."""
    hw, e = s.hardware, s.engine
    if hw.data_parallel_size == 1:
        return []
    flags = [f"--data-parallel-size {hw.data_parallel_size}"]
    if hw.num_nodes > 1:  # the head node's line; the others add --headless and their first rank
        local = hw.data_parallel_size // hw.num_nodes
        flags += [
            f"--data-parallel-size-local {local}",
            "--data-parallel-address HEAD_NODE_IP",
            f"--data-parallel-rpc-port {RPC_PORT}",
        ]
    if hw.expert_parallel:
        flags.append(f"--all2all-backend {e.all2all_backend}")
    if e.enable_dbo:  # the thresholds where they are not vLLM's defaults
        defaults = EngineConfig()
        flags.append("--enable-dbo")
        if e.dbo_decode_token_threshold != defaults.dbo_decode_token_threshold:
            flags.append(f"--dbo-decode-token-threshold {e.dbo_decode_token_threshold}")
        if e.dbo_prefill_token_threshold != defaults.dbo_prefill_token_threshold:
            flags.append(f"--dbo-prefill-token-threshold {e.dbo_prefill_token_threshold}")
    if e.enable_eplb:
        flags.append("--enable-eplb")
        if e.eplb_num_redundant_experts:
            flags.append(f"--eplb-config '{json.dumps({'num_redundant_experts': e.eplb_num_redundant_experts})}'")
    return flags


def other_nodes_note(s: Scenario) -> str | None:
    """How the other nodes of a multi-node group are started, or None on one node."""
    hw = s.hardware
    if hw.data_parallel_size == 1 or hw.num_nodes == 1:
        return None
    local = hw.data_parallel_size // hw.num_nodes
    if hw.num_nodes == 2:
        return f"# on the other node: the same line with --headless --data-parallel-start-rank {local}"
    return f"# on node i = 1..{hw.num_nodes - 1}: the same line with --headless --data-parallel-start-rank i x {local}"
