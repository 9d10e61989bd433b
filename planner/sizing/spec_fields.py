"""The sizing file's `search:` fields read with the scenario's message shape (file: key = value: what is
allowed): sections, mappings with known keys, scalars, integer lists held to a scenario rule, price maps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import Ctx, Rule, did_you_mean


def section(parent: dict, key: str) -> Any:
    """A sub-section as written; absent (or left empty in YAML: null) means its defaults. Anything else,
    a list or a number, goes to `mapping` to be refused, not replaced by the defaults."""
    value = parent.get(key)
    return {} if value is None else value


def mapping(raw: Any, where: str, keys: Sequence[str], ctx: Ctx) -> dict:
    if not isinstance(raw, dict):
        raise ScenarioError(ctx.file, where, raw, f"expected a mapping with keys {', '.join(keys)}")
    for key in raw:
        if key not in keys:
            hint = did_you_mean(str(key), list(keys))
            raise ScenarioError(ctx.file, f"{where}.{key}", NO_VALUE, f"unknown key{hint}; allowed: {', '.join(keys)}")
    return raw


_TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def scalar(
    d: dict, key: str, kind: type, default: Any, where: str, ctx: Ctx, ok, allowed: str, choices: Sequence[str] = ()
) -> Any:
    """d[key] of `kind` (default when absent; None: required) that `ok` accepts, else a ScenarioError saying
    `allowed` (and the nearest of `choices` to a string given)."""
    path = f"{where}.{key}"
    if key not in d:
        if default is None:
            raise ScenarioError(ctx.file, path, NO_VALUE, f"missing; {allowed}")
        return default
    v = d[key]
    good_type = isinstance(v, (int, float)) if kind is float else isinstance(v, kind)
    if isinstance(v, bool) and kind is not bool or not good_type:
        raise ScenarioError(ctx.file, path, v, f"expected {_TYPE_WORDS[kind]}" + (f" ({allowed})" if allowed else ""))
    if kind is float:
        v = float(v)
        if not math.isfinite(v):
            raise ScenarioError(ctx.file, path, v, "must be a finite number")
    if not ok(v):
        hint = did_you_mean(v, choices) if choices else ""
        raise ScenarioError(ctx.file, path, v, allowed + hint)
    return v


def int_list(raw: Any, key: str, rule: Rule, ctx: Ctx) -> tuple[int, ...]:
    """Integers, each allowed by `rule` (the scenario's rule for the same quantity)."""
    values = raw if isinstance(raw, list) else [raw]
    if not values:
        raise ScenarioError(ctx.file, key, raw, "is empty: give at least one value")
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ScenarioError(ctx.file, f"{key}[{i}]", v, f"expected an integer ({rule.allowed})")
        if not rule.ok(v):
            raise ScenarioError(ctx.file, f"{key}[{i}]", v, rule.allowed)
    return tuple(dict.fromkeys(values))


def price_map(raw: Any, key: str, ctx: Ctx, most_usd: float) -> dict[str, float]:
    """GPU name -> USD, each in [0, most_usd] (the catalog's bound for the same price: 1e308 printed $inf)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(ctx.file, key, raw, "expected a mapping of GPU name to USD, e.g. {a10: 0.75}")
    for name, v in raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and 0 <= v <= most_usd):
            raise ScenarioError(ctx.file, f"{key}.{name}", v, f"must be a number of USD in [0, {most_usd:,.0f}]")
    return {str(k): float(v) for k, v in raw.items()}


def one_of(choices: Sequence[str]) -> str:
    return "must be one of " + ", ".join(choices)


def gpu_list(raw: Any, key: str, ctx: Ctx, empty: str) -> tuple:
    """GPUs as `hardware.gpu` takes them (catalog names or inline mappings), each once; `empty` says what an
    empty list should have been."""
    from planner.scenario.special_fields import SPECIAL
    from sim.config import HardwareConfig

    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise ScenarioError(ctx.file, key, raw, f"is empty: {empty}")
    resolve = SPECIAL[(HardwareConfig, "gpu")][0]
    gpus = tuple(resolve(item, f"{key}[{i}]", ctx) for i, item in enumerate(items))
    names = [g.name for g in gpus]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ScenarioError(ctx.file, f"{key}[{i}]", name, "is listed twice; give each GPU once (inline: a name)")
    return gpus
