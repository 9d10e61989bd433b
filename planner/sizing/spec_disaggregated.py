"""The sizing file's `search.disaggregated` section: prefill/decode units to weigh against the aggregated
candidates, read with the scenario's message shape (file: key = value: what is allowed).

    search:
      disaggregated:
        prefill: {gpus: [h100-sxm], tensor_parallel_sizes: [4]}     # default: the scenario's GPU and size
        decode: {gpus: [h100-sxm, h200], tensor_parallel_sizes: [4, 8],
                 engine: {max_num_seqs: [256, 512]}}                 # each role's own sweep over the scenario's engine
        ratios: [[1, 1], [1, 2], [2, 1]]                             # xPyD: prefill : decode replicas of a unit
        kv_transfer: {link: infiniband, bandwidth_gbit_per_s: 400}   # a fleet's fleet.kv_transfer (required)
"""

from __future__ import annotations

import itertools
from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.fleet import BANDWIDTHS
from planner.scenario.rules import Ctx, in_range
from planner.scenario.validation import build_dataclass
from planner.sizing.question import NO_SETTINGS, Disaggregated, PoolSettings
from planner.sizing.spec_fields import gpu_list, int_list, mapping, section
from sim.config import GpuSpec, KvTransferConfig, Scenario

DISAGGREGATED_KEYS = ("prefill", "decode", "ratios", "kv_transfer")
ROLE_KEYS = ("gpus", "tensor_parallel_sizes", "engine")
# 1P1D, 1P2D, 1P3D, 2P1D, 2P3D: decode-heavy splits first, as long replies need; the prefill-heavy ones for long
# prompts. A unit's replicas: at most MAX_UNIT_REPLICAS of each role (bigger units are several units).
DEFAULT_RATIOS = ((1, 1), (1, 2), (1, 3), (2, 1), (2, 3))
UNIT_REPLICAS = in_range(1, 8)
MAX_UNITS = 256  # units to search: every one runs a capacity search of its own


def parse_disaggregated(raw: Any, scenario: Scenario, tp_rule, ctx: Ctx, engine_sweep) -> Disaggregated | None:
    """None when the section is absent: aggregated candidates only. `engine_sweep(raw, scenario, ctx, where)`: the
    aggregated candidates' reader of an engine sweep (planner/sizing/spec.py), so a role's sweep accepts what a
    scenario does."""
    if raw is None:
        return None
    where = "search.disaggregated"
    d = mapping(raw, where, DISAGGREGATED_KEYS, ctx)
    roles = {
        role: parse_role(section(d, role), f"{where}.{role}", scenario, tp_rule, ctx, engine_sweep)
        for role in ("prefill", "decode")
    }
    ratios = parse_ratios(d.get("ratios"), f"{where}.ratios", ctx)
    transfer_raw = d.get("kv_transfer")
    if transfer_raw is None:
        raise ScenarioError(
            ctx.file, f"{where}.kv_transfer", NO_VALUE,
            f"missing; a prefill replica's KV reaches a decode replica over a link: give its link and"
            f" bandwidth_gbit_per_s ({BANDWIDTHS})",
        )  # fmt: skip
    transfer = build_dataclass(KvTransferConfig, transfer_raw, f"{where}.kv_transfer", ctx)
    if transfer.bandwidth_gbit_per_s is None:
        raise ScenarioError(
            ctx.file, f"{where}.kv_transfer.bandwidth_gbit_per_s", NO_VALUE,
            f"missing; link {transfer.link} needs its bandwidth per GPU, one direction, in Gb/s ({BANDWIDTHS})",
        )  # fmt: skip
    (pg, ptp, pe), (dg, dtp, de) = roles["prefill"], roles["decode"]
    spec = Disaggregated(pg, ptp, dg, dtp, ratios, transfer, dict(transfer_raw), pe, de)
    units = len(pg) * len(ptp) * len(pe) * len(dg) * len(dtp) * len(de) * len(ratios)
    check_unit_count(units, "prefill/decode units (GPUs x sizes x engine settings per role x ratios)", where, ctx)
    return spec


def check_unit_count(units: int, what: str, where: str, ctx: Ctx) -> None:
    """Refuse more than MAX_UNITS units: every one runs a capacity search of its own."""
    if units > MAX_UNITS:
        raise ScenarioError(
            ctx.file, where, NO_VALUE,
            f"{units:,} {what}: at most {MAX_UNITS}, each runs a capacity search of its own; narrow the lists",
        )  # fmt: skip


def parse_role(raw: Any, where: str, scenario: Scenario, tp_rule, ctx: Ctx, engine_sweep):
    """A pool role's candidates: (GPUs, tensor parallel sizes, engine settings), the scenario's where not given."""
    r = mapping(raw, where, ROLE_KEYS, ctx)
    gpus = _gpus(r.get("gpus"), scenario, f"{where}.gpus", ctx)
    tps = int_list(
        r.get("tensor_parallel_sizes", [scenario.hardware.tensor_parallel_size]),
        f"{where}.tensor_parallel_sizes",
        tp_rule,
        ctx,
    )
    return gpus, tps, _pool_settings(r.get("engine"), scenario, f"{where}.engine", ctx, engine_sweep)


def _pool_settings(raw: Any, scenario: Scenario, where: str, ctx: Ctx, engine_sweep) -> tuple[PoolSettings, ...]:
    """Every combination of a role's engine sweep, each as the pool's `engine` keys (as written) and its values (as
    read); the scenario's engine alone when there is none. Each value is checked where it was written first."""
    if raw is None:
        return (NO_SETTINGS,)
    engine_sweep(raw, scenario, ctx, where)  # every value, with its index in the message
    names = list(raw)
    lists = [raw[n] if isinstance(raw[n], list) else [raw[n]] for n in names]
    options = []
    for combo in itertools.product(*lists):
        written = dict(zip(names, combo))
        read = engine_sweep({n: [v] for n, v in written.items()}, scenario, ctx, where)
        option = PoolSettings(tuple((n, read[n][0]) for n in names), written)
        if option not in options:  # a value given twice is one setting
            options.append(option)
    return tuple(options)


def _gpus(raw: Any, scenario: Scenario, key: str, ctx: Ctx) -> tuple[GpuSpec, ...]:
    if raw is None:
        return (scenario.hardware.gpu,)
    return gpu_list(raw, key, ctx, "name at least one GPU (or leave the key out: the scenario's)")


def parse_ratios(
    raw: Any, key: str, ctx: Ctx, roles: tuple[str, str] = ("prefill", "decode"), default=DEFAULT_RATIOS
) -> tuple[tuple[int, int], ...]:
    """A unit's replicas per role, [first role's, second's] pairs."""
    if raw is None:
        return default
    allowed = (
        f"a list of [{roles[0]} replicas, {roles[1]} replicas] pairs, each {UNIT_REPLICAS.allowed}, e.g. [[1, 2],"
        " [2, 3]]"
    )
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(ctx.file, key, raw, allowed)
    ratios = []
    for i, pair in enumerate(raw):
        good = isinstance(pair, list) and len(pair) == 2
        good = good and all(isinstance(v, int) and not isinstance(v, bool) and UNIT_REPLICAS.ok(v) for v in pair)
        if not good:
            raise ScenarioError(ctx.file, f"{key}[{i}]", pair, allowed)
        if tuple(pair) in ratios:
            raise ScenarioError(ctx.file, f"{key}[{i}]", pair, "is listed twice; give each ratio once")
        ratios.append(tuple(pair))
    return tuple(ratios)
