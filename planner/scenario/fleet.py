"""A scenario's `fleet:` section -> `sim.config.FleetConfig`, every pool checked as a one-pool scenario is.

    fleet:
      pools:
        prefill: {role: prefill, hardware: {gpu: h100-sxm, tensor_parallel_size: 4, replicas: 2}}
        decode: {role: decode, hardware: {gpu: h100-sxm, tensor_parallel_size: 4}, engine: {max_num_seqs: 512}}
      router: {policy: least_outstanding}
      kv_transfer: {link: infiniband, bandwidth_gbit_per_s: 400}

A pool's `hardware` is a one-pool scenario's `hardware` (its router aside: the fleet's routes), its `engine` the
keys it sets over the scenario's `engine`; each pool then goes through the scenario's own relation checks
(`check_relations`), its messages naming the pool's keys. What only a fleet has is checked here: the roles
(one prefill and one decode pool, or mixed pools), the router against the pools, the KV link.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, NamedTuple

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.cross_checks import check_relations
from planner.scenario.rules import Ctx, did_you_mean
from planner.scenario.special_fields import SPECIAL
from planner.scenario.validation import _convert_scalar, allowed_keys, build_dataclass
from sim.config import (
    EngineConfig,
    FleetConfig,
    FleetRouterConfig,
    HardwareConfig,
    KvTransferConfig,
    PoolConfig,
    Scenario,
)

FLEET_KEYS = ("pools", "router", "kv_transfer")
POOL_KEYS = ("role", "hardware", "engine", "model")
POOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,39}")
MAX_POOLS = 16
# Typical bandwidths per GPU, one direction, for the message of a link given without one.
BANDWIDTHS = "InfiniBand NDR 400, HDR 200; RoCE 100-400; NVLink 4 3,600 (450 GB/s); PCIe Gen5 x16 about 500; TCP 10-100"


class PoolInput(NamedTuple):
    """One pool as the file gives it, each key checked on its own."""

    name: str
    role: str
    hardware_raw: dict
    hardware: HardwareConfig
    engine_raw: dict  # the engine keys the pool sets
    engine: EngineConfig  # those keys' values (the rest defaults, unused)
    model_raw: Any  # None: the scenario's model


def validate_fleet(raw: dict, ctx: Ctx) -> Scenario:
    """A scenario mapping with `fleet:` (the top-level defaults filled in) -> the Scenario, whose `hardware` and
    `engine` are its first pool's and whose `fleet` holds every pool."""
    fleet_raw = _mapping(raw.pop("fleet"), "fleet", FLEET_KEYS, ctx)
    if "hardware" in raw:
        raise ScenarioError(
            ctx.file, "hardware", NO_VALUE,
            "give hardware (one pool of identical replicas) or fleet (several pools), not both; a fleet's pools"
            " each have their own hardware",
        )  # fmt: skip
    pools_raw = fleet_raw.get("pools")
    if not isinstance(pools_raw, dict) or not pools_raw:
        raise ScenarioError(
            ctx.file, "fleet.pools", NO_VALUE if pools_raw is None else pools_raw,
            "expected a mapping of pool names to pools, each with keys " + ", ".join(POOL_KEYS),
        )  # fmt: skip
    if len(pools_raw) > MAX_POOLS:
        raise ScenarioError(ctx.file, "fleet.pools", NO_VALUE, f"{len(pools_raw)} pools: at most {MAX_POOLS}")
    parsed = [_pool(name, value, ctx) for name, value in pools_raw.items()]
    # The scenario's own keys, checked once, with the first pool's (already checked) hardware in `hardware`.
    base = build_dataclass(Scenario, {**raw, "hardware": parsed[0].hardware_raw}, "", ctx)
    for pool in parsed:
        if pool.model_raw is not None:
            _check_model(pool.name, pool.model_raw, base, ctx)
    pools = tuple(_resolve_pool(base, raw, pool, ctx) for pool in parsed)
    router = build_dataclass(FleetRouterConfig, fleet_raw.get("router") or {}, "fleet.router", ctx)
    transfer_raw = fleet_raw.get("kv_transfer")
    transfer = (
        None if transfer_raw is None else build_dataclass(KvTransferConfig, transfer_raw, "fleet.kv_transfer", ctx)
    )
    fleet = FleetConfig(pools, router, transfer)
    _check_roles(fleet, ctx)
    _check_unmodelled(fleet, ctx)
    _check_router(fleet, {pool.name: pool.engine_raw for pool in parsed}, ctx)
    _check_transfer(fleet, ctx)
    first = base.pool_scenario(pools[0])
    return dataclasses.replace(first, fleet=fleet)


def _mapping(value: Any, path: str, keys: tuple[str, ...], ctx: Ctx) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ScenarioError(ctx.file, path, value, f"expected a mapping with keys {', '.join(keys)}")
    for key in value:
        if key not in keys:
            hint = did_you_mean(str(key), list(keys))
            raise ScenarioError(ctx.file, f"{path}.{key}", NO_VALUE, f"unknown key{hint}; allowed: {', '.join(keys)}")
    return value


def _pool(name: Any, value: Any, ctx: Ctx) -> PoolInput:
    if not isinstance(name, str) or not POOL_NAME.fullmatch(name):
        raise ScenarioError(
            ctx.file, "fleet.pools", name,
            "a pool's name: 1 to 40 letters, digits, - or _, starting with a letter or digit",
        )  # fmt: skip
    where = f"fleet.pools.{name}"
    pool = _mapping(value, where, POOL_KEYS, ctx)
    role = _convert_scalar(PoolConfig, "role", str, pool.get("role", "mixed"), f"{where}.role", ctx)
    hw_raw = pool.get("hardware")
    if not isinstance(hw_raw, dict):
        expected = f"a mapping with keys {allowed_keys(HardwareConfig)} but router"
        raise ScenarioError(
            ctx.file, f"{where}.hardware", NO_VALUE if hw_raw is None else hw_raw, "expected " + expected
        )
    if "router" in hw_raw:
        raise ScenarioError(
            ctx.file, f"{where}.hardware.router", hw_raw["router"],
            "a fleet's router routes between every pool's replicas: set fleet.router.policy instead",
        )  # fmt: skip
    hardware = build_dataclass(HardwareConfig, hw_raw, f"{where}.hardware", ctx)
    engine_raw = pool.get("engine") or {}
    engine = build_dataclass(EngineConfig, engine_raw, f"{where}.engine", ctx)  # keys, types, ranges: its own path
    return PoolInput(name, role, hw_raw, hardware, engine_raw, engine, pool.get("model"))


def _check_model(name: str, model_raw: Any, base: Scenario, ctx: Ctx) -> None:
    """A pool may name its model, which must be the scenario's: a router between two models is two deployments."""
    resolve = SPECIAL[(Scenario, "model")][0]
    model = resolve(model_raw, f"fleet.pools.{name}.model", ctx)
    if model != base.model:
        raise ScenarioError(
            ctx.file, f"fleet.pools.{name}.model", model.name,
            f"every pool of a fleet serves the scenario's model ({base.model.name}): a request's prefill and decode,"
            " or the requests a router spreads, must meet the same weights; simulate another model as its own scenario",
        )  # fmt: skip


def _resolve_pool(base: Scenario, raw: dict, pool: PoolInput, ctx: Ctx) -> PoolConfig:
    """The pool's engine (its keys over the scenario's), through the scenario's own relation checks."""
    name, engine_raw = pool.name, pool.engine_raw
    engine = dataclasses.replace(base.engine, **{key: getattr(pool.engine, key) for key in engine_raw})

    def where(key: str) -> str:
        section, _, rest = key.partition(".")
        if section == "hardware":
            return f"fleet.pools.{name}.{key}"
        if section == "engine":
            return f"fleet.pools.{name}.{key}" if rest in engine_raw else f"{key} (pool {name})"
        return key

    merged_raw = {**raw, "engine": {**(raw.get("engine") or {}), **engine_raw}}
    # A data-parallel pool's replicas are whole groups (sim/fleet_dp.py): each group is checked as one scenario's.
    one = dataclasses.replace(pool.hardware, replicas=1)
    scenario = check_relations(dataclasses.replace(base, hardware=one, engine=engine), merged_raw, ctx, where)
    hardware = dataclasses.replace(scenario.hardware, replicas=pool.hardware.replicas)
    return PoolConfig(name, hardware, scenario.engine, pool.role)


def _check_unmodelled(fleet: FleetConfig, ctx: Ctx) -> None:
    """Engine settings a fleet's pools do not run yet: refused, never dropped."""
    for pool in fleet.pools:
        if pool.engine.speculative is not None:
            raise ScenarioError(
                ctx.file, f"engine.speculative (pool {pool.name})", pool.engine.speculative.method,
                "speculative decoding is modelled for one pool of replicas, not yet in a fleet; remove it, or"
                " simulate the pool on its own with hardware instead of fleet",
            )  # fmt: skip
        if pool.engine.num_scheduler_steps != 1:
            raise ScenarioError(
                ctx.file, f"engine.num_scheduler_steps (pool {pool.name})", pool.engine.num_scheduler_steps,
                "multi-step scheduling (vLLM V0) is modelled for one pool of replicas, not in a fleet; allowed: 1",
            )  # fmt: skip
        if pool.engine.kv_offload is not None:
            raise ScenarioError(
                ctx.file, f"engine.kv_offload (pool {pool.name})", NO_VALUE,
                "a host KV tier is modelled for one pool of replicas, not yet in a fleet; remove it, or simulate the"
                " pool on its own with hardware instead of fleet",
            )  # fmt: skip


def _check_roles(fleet: FleetConfig, ctx: Ctx) -> None:
    """Mixed pools, or one prefill pool and one decode pool (x prefill and y decode replicas: xPyD)."""
    prefill, decode, mixed = (fleet.with_role(role) for role in ("prefill", "decode", "mixed"))
    for pools, role, other in ((decode, "decode", "prefill"), (prefill, "prefill", "decode")):
        if pools and not (prefill if role == "decode" else decode):
            what = "computes the prompts it decodes" if role == "decode" else "pulls and decodes the KV it computes"
            raise ScenarioError(
                ctx.file, f"fleet.pools.{pools[0].name}.role", role,
                f"a {role} pool needs a {other} pool that {what} (a pool with role: {other}); allowed: mixed, or one"
                " prefill pool and one decode pool",
            )  # fmt: skip
        if len(pools) > 1:
            raise ScenarioError(
                ctx.file, f"fleet.pools.{pools[1].name}.role", role,
                f"a fleet has at most one {role} pool ({pools[0].name}): give more {role} engines as its replicas",
            )  # fmt: skip
    if prefill and mixed:
        raise ScenarioError(
            ctx.file, f"fleet.pools.{mixed[0].name}.role", "mixed",
            "a fleet with a prefill and a decode pool routes every request through both; a mixed pool beside them"
            " is not modelled: simulate it as a fleet of its own",
        )  # fmt: skip
    for pool in (*prefill, *decode):
        if pool.engine.scheduler != "continuous":
            raise ScenarioError(
                ctx.file, f"fleet.pools.{pool.name}.engine.scheduler", pool.engine.scheduler,
                f"a {pool.role} pool runs vLLM's continuous scheduler (its KV connector hooks); allowed: continuous",
            )  # fmt: skip
    first = fleet.pools[0]
    for pool in fleet.pools[1:]:  # one workload for the fleet: its requests' lengths are clipped once
        if pool.engine.max_model_len != first.engine.max_model_len:
            raise ScenarioError(
                ctx.file, f"fleet.pools.{pool.name}.engine.max_model_len", pool.engine.max_model_len,
                f"must equal pool {first.name}'s ({first.engine.max_model_len}): every pool of a fleet may be sent"
                " any request of the workload (a prefill pool's KV is held whole by the decode pool)",
            )  # fmt: skip
    if prefill:
        p, d = prefill[0], decode[0]
        for key in ("kv_cache_dtype", "block_size"):  # NIXL's compatibility check: what one sends the other holds
            if getattr(p.engine, key) != getattr(d.engine, key):
                raise ScenarioError(
                    ctx.file, f"fleet.pools.{d.name}.engine.{key}", getattr(d.engine, key),
                    f"must equal the prefill pool's ({getattr(p.engine, key)}): the decode pool holds the KV the"
                    " prefill pool computes, in its layout",
                )  # fmt: skip


def _check_router(fleet: FleetConfig, pool_engine_keys: dict[str, dict], ctx: Ctx) -> None:
    """pool_engine_keys: the engine keys each pool sets itself (a message names the key the user wrote)."""
    r = fleet.router
    length_keys = {"threshold_tokens": r.threshold_tokens, "short_pool": r.short_pool, "long_pool": r.long_pool}
    if r.policy != "length":
        for key, value in length_keys.items():
            if value is not None:
                raise ScenarioError(
                    ctx.file, f"fleet.router.{key}", value,
                    f"only the length router reads it; policy {r.policy} does not (set policy: length)",
                )  # fmt: skip
    if r.policy == "length":
        if len(fleet.pools) != 2 or fleet.disaggregated:
            raise ScenarioError(
                ctx.file, "fleet.router.policy", "length",
                f"routes by prompt length between two mixed pools; this fleet has {len(fleet.pools)} pool(s)"
                + (" with prefill/decode roles" if fleet.disaggregated else "")
                + ": add a second pool, or use round_robin, least_outstanding or prefix",
            )  # fmt: skip
        for key, value in length_keys.items():
            if value is None:
                raise ScenarioError(
                    ctx.file, f"fleet.router.{key}", NO_VALUE,
                    "missing; policy length needs threshold_tokens, short_pool and long_pool",
                )  # fmt: skip
        names = [p.name for p in fleet.pools]
        for key in ("short_pool", "long_pool"):
            value = length_keys[key]
            if value not in names:
                hint = did_you_mean(str(value), names)
                raise ScenarioError(
                    ctx.file, f"fleet.router.{key}", value, f"no such pool{hint}; pools: {', '.join(names)}"
                )
        if r.short_pool == r.long_pool:
            raise ScenarioError(
                ctx.file,
                "fleet.router.long_pool",
                r.long_pool,
                f"must be the other pool than short_pool ({r.short_pool})",
            )
    if r.policy == "prefix":
        # the pools a request first meets: the prefill pool, or every mixed pool
        for pool in fleet.with_role("prefill") or fleet.pools:
            if pool.hardware.data_parallel_size > 1:
                raise ScenarioError(
                    ctx.file, "fleet.router.policy", "prefix",
                    f"pool {pool.name} is a data-parallel group, whose ranks vLLM's DP balancer picks by queue length"
                    " alone: a router sees no rank's prefix cache behind it; use round_robin or least_outstanding",
                )  # fmt: skip
            if not pool.engine.enable_prefix_caching:
                own = "enable_prefix_caching" in pool_engine_keys[pool.name]
                key = f"fleet.pools.{pool.name}.engine" if own else "engine"
                raise ScenarioError(
                    ctx.file, f"{key}.enable_prefix_caching", False,
                    "the prefix router sends a request to the replica holding its longest cached prefix: with prefix"
                    " caching off no replica holds one; turn it on, or use round_robin or least_outstanding",
                )  # fmt: skip


def _check_transfer(fleet: FleetConfig, ctx: Ctx) -> None:
    t = fleet.kv_transfer
    if fleet.disaggregated and t is None:
        raise ScenarioError(
            ctx.file, "fleet.kv_transfer", NO_VALUE,
            "missing; a prefill pool's KV reaches the decode pool over a link: give its link and bandwidth_gbit_per_s"
            f" ({BANDWIDTHS})",
        )  # fmt: skip
    if t is None:
        return
    if not fleet.disaggregated:
        raise ScenarioError(
            ctx.file, "fleet.kv_transfer", NO_VALUE,
            "is the link from a prefill pool to a decode pool, and no pool has role prefill: remove it, or give the"
            " pools their roles",
        )  # fmt: skip
    if t.bandwidth_gbit_per_s is None:
        raise ScenarioError(
            ctx.file, "fleet.kv_transfer.bandwidth_gbit_per_s", NO_VALUE,
            f"missing; link {t.link} needs its bandwidth per GPU, one direction, in Gb/s ({BANDWIDTHS})",
        )  # fmt: skip
    if t.layerwise and t.connector == "NixlConnector":
        raise ScenarioError(
            ctx.file, "fleet.kv_transfer.layerwise", True,
            "NixlConnector moves a request's blocks once its prefill is done, never layer by layer (its save_kv_layer"
            " is a no-op in vLLM); use LMCacheConnectorV1, MooncakeConnector or P2pNcclConnector, or layerwise: false",
        )  # fmt: skip
