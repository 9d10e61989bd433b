"""A YAML mapping -> the dataclasses of `sim.config`, walked generically: their fields are the allowed keys,
their type hints the type checks, their defaults the defaults; each value is checked against `RULES`, and the
special fields (`planner.scenario.special_fields`) resolve themselves. A field added to a dataclass is accepted and
type-checked with no change here; add a rule if it has a range."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any

from planner.errors import NO_VALUE, ScenarioError
from planner.scenario.rules import RULES, SLO_KEYS, Ctx, did_you_mean, is_percentile_key
from planner.scenario.special_fields import SPECIAL
from planner.scenario.yaml_loader import YAML11_BOOLS
from sim.config import PoolConfig, Scenario

NOT_USER_KEYS = {(Scenario, "source"), (PoolConfig, "name")}  # ours, not the user's (a pool's name is its key)
TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def build_dataclass(cls: type, data: Any, path: str, ctx: Ctx) -> Any:
    """A mapping -> `cls(**fields)`, checking keys, types and rules of every field."""
    fields = {f.name: f for f in dataclasses.fields(cls) if (cls, f.name) not in NOT_USER_KEYS}
    if not isinstance(data, dict):
        raise ScenarioError(ctx.file, path, data, f"expected a mapping with keys {allowed_keys(cls)}")
    for key in data:
        if key not in fields:
            hint = did_you_mean(str(key), list(fields))
            if cls is Scenario and key == "search":  # a sizing file given to simulate, run or memory
                hint = " (a sizing file's section: planner size reads it)"
            raise ScenarioError(
                ctx.file, _join(path, key), NO_VALUE, f"unknown key{hint}; allowed: {allowed_keys(cls)}"
            )
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        key_path = _join(path, name)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        if name not in data:
            if not has_default:
                raise ScenarioError(
                    ctx.file, key_path, NO_VALUE, "missing; required: " + _expected(cls, name, hints[name])
                )
            continue
        value = data[name]
        if value is None and dataclasses.is_dataclass(hints[name]):
            value = {}  # `engine:` with every child commented out: the defaults (or "missing ..."), not a type error
        kwargs[name] = _convert(cls, name, hints[name], value, key_path, ctx)
    return cls(**kwargs)


def _convert(cls: type, name: str, hint: Any, value: Any, key_path: str, ctx: Ctx) -> Any:
    """One value -> its field's type, then its rule. Specials (model, gpu, trace path) resolve here."""
    if (cls, name) in SPECIAL:
        return SPECIAL[(cls, name)][0](value, key_path, ctx)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # `X | None`
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, key_path, ctx)
    if typing.get_origin(hint) is dict:  # the SLO tables: statistic -> bound in ms
        if not isinstance(value, dict):
            raise _type_error(cls, name, hint, value, key_path, ctx)
        for key in value:
            if not is_percentile_key(key):
                hint_msg = did_you_mean(str(key), ["mean", "p50", "p90", "p99"])
                raise ScenarioError(
                    ctx.file, _join(key_path, key), NO_VALUE, f"unknown statistic{hint_msg}; allowed: {SLO_KEYS}"
                )
        value_type = typing.get_args(hint)[1]
        return {k: _convert_scalar(cls, name, value_type, v, _join(key_path, k), ctx) for k, v in value.items()}
    if hint in TYPE_NAMES:
        return _convert_scalar(cls, name, hint, value, key_path, ctx)
    raise TypeError(f"planner.scenario.load cannot validate {cls.__name__}.{name}: {hint}")  # a new kind of field


def _convert_scalar(cls: type, name: str, hint: type, value: Any, key_path: str, ctx: Ctx) -> Any:
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is float:  # an int is a fine float
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:  # bool is an int in Python, not in a scenario
        ok = isinstance(value, hint) and not isinstance(value, bool)
    if not ok:
        raise _type_error(cls, name, hint, value, key_path, ctx)
    if hint is float:
        value = float(value)
        if not math.isfinite(value):
            raise ScenarioError(ctx.file, key_path, value, "must be a finite number")
    rule = RULES.get((cls, name))
    if rule is not None and not rule.ok(value):
        hint_msg = did_you_mean(value, rule.choices) if rule.choices and isinstance(value, str) else ""
        raise ScenarioError(ctx.file, key_path, value, rule.allowed + hint_msg)
    return value


def _type_error(cls: type, name: str, hint: Any, value: Any, key_path: str, ctx: Ctx) -> ScenarioError:
    allowed = "expected " + _expected(cls, name, hint)
    if isinstance(value, str) and hint in (int, float) and _parses_as_float(value):
        allowed += " (this is text: write the number without quotes)"
    elif isinstance(value, str) and hint is bool and value.lower() in YAML11_BOOLS:
        allowed += " (yes/no/on/off are text here, as in YAML 1.2)"
    elif isinstance(value, str) and hint in (int, float) and ":" in value:
        allowed += " (a:b is text here, not a base-60 number as in YAML 1.1)"
    return ScenarioError(ctx.file, key_path, value, allowed)


def _expected(cls: type, name: str, hint: Any) -> str:
    """What a field takes, in words: its type and, where there is one, its rule."""
    if (cls, name) in SPECIAL:
        return SPECIAL[(cls, name)][1]()
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = args[0]
    if dataclasses.is_dataclass(hint):
        return f"a mapping with keys {allowed_keys(hint)}"
    if typing.get_origin(hint) is dict:
        return f"a mapping of {SLO_KEYS} to a bound in ms"
    text = TYPE_NAMES.get(hint, str(hint))
    rule = RULES.get((cls, name))
    return f"{text} ({rule.allowed})" if rule else text


def _parses_as_float(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def allowed_keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls) if (cls, f.name) not in NOT_USER_KEYS)
