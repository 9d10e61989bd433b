"""The `vllm serve` lines of a fleet: one per pool, a prefill or decode pool's with its KV connector.

`--kv-transfer-config` as vLLM's connector guides give it: NixlConnector with kv_role kv_both on both sides (the
proxy's kv_transfer_params say which side sends), the others as kv_producer on the prefill side and kv_consumer
on the decode side (docs.vllm.ai: features/nixl_connector_usage, features/mooncake_connector_usage).
"""

from __future__ import annotations

import dataclasses
import json

from planner.sizing.dp_serve import other_nodes_note
from planner.sizing.serve import vllm_serve_command
from sim.config import PoolConfig, Scenario

ROLE_OF = {"prefill": "kv_producer", "decode": "kv_consumer"}


def fleet_serve_lines(s: Scenario) -> list[str]:
    """A comment and a command line per pool (the scenario's `fleet`)."""
    fleet = s.fleet
    lines = []
    for pool in fleet.pools:
        hw, pool_scenario = pool.hardware, s.pool_scenario(pool)
        engine = dataclasses.replace(hw, replicas=1).describe()  # a data-parallel pool's replica: one whole group
        lines.append(f"# pool {pool.name} ({pool.role}): {hw.replicas} replica(s) of {engine}")
        command = vllm_serve_command(pool_scenario)
        if pool.role != "mixed" and not command.startswith("#"):
            command += f" --kv-transfer-config '{kv_transfer_config(fleet.kv_transfer.connector, pool)}'"
        lines.append(command)
        if (others := other_nodes_note(pool_scenario)) is not None:  # a group over several nodes
            lines.append(others)
    if fleet.disaggregated:
        lines.append(
            "# behind a proxy that sends each request to a prefill replica with max_tokens 1, then with its"
            " kv_transfer_params to a decode replica (vLLM's disaggregated-serving proxy examples, llm-d, Dynamo)"
        )
    elif fleet.router.policy == "length":
        r = fleet.router
        lines.append(
            f"# behind a router that sends prompts up to {r.threshold_tokens:,} tokens to pool {r.short_pool}, longer"
            f" ones to pool {r.long_pool}"
        )
    else:
        lines.append(f"# behind a router that routes by {fleet.router.policy}")
    return lines


def kv_transfer_config(connector: str, pool: PoolConfig) -> str:
    role = "kv_both" if connector == "NixlConnector" else ROLE_OF[pool.role]
    return json.dumps({"kv_connector": connector, "kv_role": role}, separators=(",", ":"))
