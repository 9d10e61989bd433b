"""A deployment manifest a cluster user can start from: the values of llm-d's ModelService Helm chart
(llm-d-incubation/llm-d-modelservice) for the recommended deployment, aggregated replicas or prefill/decode units.

The layout is the chart's own example for P/D disaggregation (`examples/values-pd.yaml`): `modelArtifacts` (the
checkpoint), `routing`, then a `decode` and a `prefill` section, each with `replicas`, `parallelism.tensor` and one
`vllm` container whose `modelCommand: vllmServe` makes the chart start `vllm serve <modelArtifacts.name>` with the
tensor parallel size from `parallelism`, and append the container's `args`: here every other flag of the `vllm
serve` line the planner prints for that role. Aggregated replicas are the decode section alone (`prefill.create:
false`, as the chart's inference-scheduling guide deploys them). A prefill/decode deployment sets the routing
sidecar's connector to `nixlv2` (the chart's NixlConnector path); units become one pool of their prefill and one of
their decode replicas behind llm-d's scheduler, which may route better than independent units. Images, memory and CPU
requests, node selection of each role's GPU type and the gateway are the cluster's: left to the chart's defaults.
"""

from __future__ import annotations

import shlex

import yaml

from planner.catalog import gpu_family
from planner.sizing.fleet_serve import kv_transfer_config
from planner.sizing.serve import vllm_serve_command
from sim.config import Scenario

CHART = "llm-d-incubation/llm-d-modelservice"


def _args(s: Scenario, kv_transfer: str | None) -> list[str]:
    """The `vllm serve` line's flags but the model and the tensor parallel size (the chart sets both)."""
    words = shlex.split(vllm_serve_command(s))[3:]  # vllm serve MODEL
    at = words.index("--tensor-parallel-size")
    del words[at : at + 2]
    if kv_transfer is not None:
        words += ["--kv-transfer-config", kv_transfer]
    return words


def _role(s: Scenario, replicas: int, kv_transfer: str | None) -> dict:
    tp = s.hardware.tensor_parallel_size
    family = gpu_family(s.hardware.gpu.name)
    resource = "amd.com/gpu" if family is not None and family.vendor == "amd" else "nvidia.com/gpu"
    return {
        "create": True,
        "replicas": replicas,
        "parallelism": {"tensor": tp, "data": 1},
        "containers": [
            {
                "name": "vllm",
                "modelCommand": "vllmServe",
                "args": _args(s, kv_transfer),
                "resources": {"limits": {resource: str(tp)}, "requests": {resource: str(tp)}},
                "mountModelVolume": True,
            }
        ],
    }


def llmd_values(replica: Scenario | None, replicas: int, unit: Scenario | None = None, units: int = 0) -> str | None:
    """The chart's values for `replicas` copies of the aggregated `replica`, or for `units` prefill/decode units
    (`unit`: a fleet of a prefill and a decode pool); None when the model has no checkpoint to serve, its serve
    line is not vLLM's (the planner's baselines), the units' KV connector is not NixlConnector, or the replica (or a
    unit's pool) is a data-parallel group (the chart runs one as a LeaderWorkerSet of one pod per node with its own start-rank
    script, llm-d-infra's wide-ep-lws example, whose `parallelism.data` counts nodes, a stopgap by the example's own
    note: a layout too unsettled to write for a user; the serve lines say how to start the group)."""
    s = unit if unit is not None else replica
    if unit is None and replica.hardware.data_parallel_size > 1:
        return None
    if unit is not None and any(pool.hardware.data_parallel_size > 1 for pool in unit.fleet.pools):
        return None  # a unit's pool that is a data-parallel group: as a replica that is one
    if unit is not None and unit.fleet.kv_transfer is None:
        return None  # a length-routed unit: the chart has no router by prompt length
    if unit is not None and unit.fleet.kv_transfer.connector != "NixlConnector":
        return None  # the chart's routing sidecar drives NixlConnector's flow (connector nixlv2)
    if vllm_serve_command(replica if unit is None else unit.pool_scenario(unit.fleet.pools[0])).startswith("#"):
        return None
    values: dict = {
        "multinode": False,
        "modelArtifacts": {"name": s.model.checkpoint, "uri": f"hf://{s.model.checkpoint}"},
        "routing": {"servicePort": 8000},
    }
    if unit is None:
        values["decode"] = _role(replica, replicas, None)
        values["prefill"] = {"create": False}
        head = (
            f"{replicas} aggregated replica(s) of {replica.hardware.tensor_parallel_size}x {replica.hardware.gpu.name}"
        )
    else:
        fleet = unit.fleet
        values["routing"]["proxy"] = {"connector": "nixlv2"}
        for pool in (fleet.with_role("decode")[0], fleet.with_role("prefill")[0]):
            kv = kv_transfer_config(fleet.kv_transfer.connector, pool)
            values[pool.role] = _role(unit.pool_scenario(pool), units * pool.hardware.replicas, kv)
        head = f"{units} prefill/decode unit(s) of {fleet.describe()}, as one pool per role"
    header = (
        f"# llm-d ModelService Helm chart values ({CHART}, the layout of its examples/values-pd.yaml) for {head}.\n"
        "# Images, memory and CPU requests, node selection of each role's GPU type and the gateway: the chart's defaults\n"
        "# and your cluster's. Written by planner size --out (the recommendation) or planner simulate --out (a\n"
        "# fleet).\n"
    )
    return header + yaml.safe_dump(values, sort_keys=False, width=1000)
