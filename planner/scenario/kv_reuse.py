"""engine.kv_offload and workload.sessions against the rest of the scenario. A host KV tier: what it combines with,
and the host memory it takes (the simulator follows vLLM's native offloading connector for one engine on full
attention with the continuous scheduler; anything else is refused, exit 2, rather than simulated without the
tier). Sessions: they make their own arrivals and prompts, so what would give others is refused."""

from __future__ import annotations

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import Ctx
from sim.config import Scenario, WorkloadConfig

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
        (s.hardware.data_parallel_size > 1, "hardware.data_parallel_size", "data-parallel ranks do not take a host tier yet"),
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
    _check_disk(offload, ctx)
    gpus = s.hardware.tensor_parallel_size
    if offload.host_memory_gib is not None and offload.size_gib * gpus > offload.host_memory_gib:
        raise ScenarioError(
            ctx.file, f"{WHERE}.size_gib", offload.size_gib,
            f"pins {offload.size_gib * gpus:g} GiB of host memory for the engine's {gpus} GPU(s), more than"
            f" host_memory_gib {offload.host_memory_gib:g} allows",
        )  # fmt: skip


def _check_disk(offload, ctx: Ctx) -> None:
    """A disk tier (sim/disk_tier.py) takes its read and write rates, and is written with everything the host tier
    stores: one no larger than the host tier would hold only what the host tier holds."""
    rates = ("disk_read_gb_s", "disk_write_gb_s")
    if offload.disk_gib is None:
        for key in rates:
            if getattr(offload, key) is not None:
                raise ScenarioError(
                    ctx.file, f"{WHERE}.{key}", getattr(offload, key), "is a disk tier's: give disk_gib"
                )
        return
    for key in rates:
        if getattr(offload, key) is None:
            raise ScenarioError(
                ctx.file, f"{WHERE}.{key}", NO_VALUE, "is required with disk_gib: the disk's GB/s, measured or spec"
            )
    if offload.disk_gib <= offload.size_gib:
        raise ScenarioError(
            ctx.file, f"{WHERE}.disk_gib", offload.disk_gib,
            f"must be larger than size_gib ({offload.size_gib:g}): the disk is written with every block the host"
            " tier stores, so a smaller one holds nothing the host tier does not",
        )  # fmt: skip


def check_sessions(wl: WorkloadConfig, raw: dict, ctx: Ctx) -> None:
    ss, where = wl.sessions, "workload.sessions"
    if ss.min_turns > ss.max_turns:
        raise ScenarioError(ctx.file, f"{where}.min_turns", ss.min_turns, f"must be <= max_turns ({ss.max_turns})")
    given = [key for key, value in (raw.get("workload") or {}).items() if value is not None]
    for key, why in (
        ("arrival", "sessions arrive at workload.sessions.rate, their turns workload.sessions.turn_gap_s apart"),
        ("trace", "a session's prompts are its own turns, not a trace's"),
        ("shared_prefix", "a session's turns share their context already"),
    ):
        if key in given:
            raise ScenarioError(ctx.file, f"workload.{key}", NO_VALUE, f"cannot be combined with {where}: {why}")
    if wl.too_long != "reject":
        raise ScenarioError(
            ctx.file, "workload.too_long", wl.too_long,
            "must be reject with workload.sessions: a turn past max_model_len ends its session (a truncated context"
            " would not be the next turn's prefix)",
        )  # fmt: skip
