"""engine.kv_offload against the rest of the scenario: what a host KV tier combines with, and the host memory it
takes. The simulator follows vLLM's native offloading connector for one engine on full attention with the
continuous scheduler; anything else is refused (exit 2) rather than simulated without the tier."""

from __future__ import annotations

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import Ctx
from sim.config import Scenario

WHERE = "engine.kv_offload"
NO_PREFIX_CACHING = "a host tier is looked up by the prefix cache's block hashes: turn prefix caching on"
SLIDING = (
    "a sliding-window model's hybrid KV cache with a host tier is not simulated (vLLM asks for"
    " --disable-hybrid-kv-cache-manager)"
)


def check_kv_offload(s: Scenario, ctx: Ctx) -> None:
    offload, e, m = s.engine.kv_offload, s.engine, s.model
    if offload is None:
        return
    refusals = [
        (s.fleet is not None, "fleet", "a fleet's pools do not take a host tier yet"),
        (e.speculative is not None, "engine.speculative", "speculative decoding with a host tier is not simulated"),
        (e.scheduler != "continuous", "engine.scheduler", "a host tier needs the continuous scheduler"),
        (e.kv_cache != "paged", "engine.kv_cache", "a host tier needs the paged KV cache"),
        (not e.enable_prefix_caching, "engine.enable_prefix_caching", NO_PREFIX_CACHING),
        (e.num_scheduler_steps > 1, "engine.num_scheduler_steps", "multi-step scheduling with a tier is not simulated"),
        (bool(m.num_sliding_layers), "model", SLIDING),
    ]  # fmt: skip
    for refused, key, why in refusals:
        if refused:
            raise ScenarioError(ctx.file, WHERE, NO_VALUE, f"cannot be combined with {key}: {why}")
    gpus = s.hardware.tensor_parallel_size
    if offload.host_memory_gib is not None and offload.size_gib * gpus > offload.host_memory_gib:
        raise ScenarioError(
            ctx.file, f"{WHERE}.size_gib", offload.size_gib,
            f"pins {offload.size_gib * gpus:g} GiB of host memory for the engine's {gpus} GPU(s), more than"
            f" host_memory_gib {offload.host_memory_gib:g} allows",
        )  # fmt: skip
