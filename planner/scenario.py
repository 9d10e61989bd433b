"""Scenario YAML -> a validated `sim.config.Scenario`.

The scenario file is the product's public interface, so every mistake in it must come back as one message
that names the file, the dotted key, the bad value and what is allowed (`ScenarioError`).

How: the YAML mapping is walked generically along the dataclasses of `sim.config` (their fields are the
allowed keys, their type hints the type checks, their defaults the defaults), each value is checked
against the one `RULES` table, three fields are resolved specially (`model`, `hardware.gpu`,
`workload.trace.path`) and `_check_relations` checks what involves more than one field (vLLM's rules for
tensor parallel, max_model_len, the token budget; what each distribution and arrival process needs).
A field added to a dataclass is accepted and type-checked with no change here; add a rule if it has a range.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import difflib
import math
import re
import types
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from planner.errors import NO_VALUE, PlannerError, ScenarioError, show_value
from sim.config import (
    DTYPE_BYTES,
    ArrivalConfig,
    Distribution,
    EngineConfig,
    GpuSpec,
    HardwareConfig,
    ModelSpec,
    Scenario,
    SharedPrefixConfig,
    SloConfig,
    TraceConfig,
    WorkloadConfig,
)

# ---------------------------------------------------------------------------------------------------------
# The rules: one entry per (dataclass, field) that has a range or a set of values. Types come from the hints.


class Rule(NamedTuple):
    ok: Callable[[Any], bool]
    allowed: str  # completes "file: key = value: ..."
    choices: tuple = ()  # for did-you-mean on enumerations


def one_of(*choices: str) -> Rule:
    return Rule(lambda v: v in choices, "must be one of " + ", ".join(choices), choices)


def at_least(lo: float) -> Rule:
    return Rule(lambda v: v >= lo, f"must be >= {lo}")


def above(lo: float) -> Rule:
    return Rule(lambda v: v > lo, f"must be > {lo}")


DISTS = {  # dist -> the parameters it uses (the others must be left out, so a typo'd choice is caught)
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "normal": ("mean", "std"),
    "lognormal": ("mean", "std"),
    "trace": (),
}
ARRIVAL_UNITS = {"rate": "requests/s", "concurrency": "the number of users"}
DIST_PARAMS = ("value", "low", "high", "mean", "std")
PROCESSES = {  # process -> what it needs (sim/workload.py divides by the rate: there is no "as fast as possible")
    "poisson": ("rate",),
    "gamma": ("rate",),
    "constant": ("rate",),
    "closed": ("concurrency",),
    "trace": (),  # rate optional: rescales the recorded arrivals
}

RULES: dict[tuple[type, str], Rule] = {
    (Scenario, "name"): Rule(lambda v: v.strip() != "", "must not be empty"),
    (Scenario, "dtype"): one_of("bfloat16", "float16", "float32"),
    (HardwareConfig, "tensor_parallel_size"): at_least(1),
    (HardwareConfig, "replicas"): at_least(1),
    (HardwareConfig, "router"): one_of("round_robin", "least_outstanding"),
    (EngineConfig, "scheduler"): one_of("continuous", "static"),
    (EngineConfig, "kv_cache"): one_of("paged", "contiguous"),
    # vLLM's CUDA kernels take 8..128; the simulator and our kernels only need a power of two.
    (EngineConfig, "block_size"): Rule(
        lambda v: v >= 1 and v & (v - 1) == 0, "must be a power of two (vLLM: 8, 16, 32, 64, 128)"
    ),
    (EngineConfig, "gpu_memory_utilization"): Rule(lambda v: 0 < v <= 1, "must be in (0, 1]"),
    (EngineConfig, "max_num_seqs"): at_least(1),
    (EngineConfig, "max_num_batched_tokens"): at_least(1),
    (EngineConfig, "max_model_len"): at_least(1),
    (EngineConfig, "kv_cache_dtype"): one_of("auto", *DTYPE_BYTES),
    (EngineConfig, "num_gpu_blocks_override"): at_least(1),
    (WorkloadConfig, "num_requests"): at_least(1),
    (WorkloadConfig, "seed"): at_least(0),
    (WorkloadConfig, "too_long"): one_of("reject", "truncate"),
    (ArrivalConfig, "process"): one_of(*PROCESSES),
    (ArrivalConfig, "rate"): above(0),
    (ArrivalConfig, "burstiness"): above(0),
    (ArrivalConfig, "concurrency"): at_least(1),
    (ArrivalConfig, "think_time_s"): at_least(0),
    (Distribution, "dist"): one_of(*DISTS),
    (Distribution, "value"): at_least(1),
    (Distribution, "low"): at_least(1),
    (Distribution, "high"): at_least(1),
    (Distribution, "mean"): above(0),
    (Distribution, "std"): at_least(0),
    (Distribution, "min"): at_least(1),
    (Distribution, "max"): at_least(1),
    (TraceConfig, "row_order"): one_of("replay", "sample"),
    (SharedPrefixConfig, "tokens"): at_least(1),
    (SharedPrefixConfig, "group_size"): at_least(1),
    **{(SloConfig, f.name): above(0) for f in dataclasses.fields(SloConfig)},  # the bounds, in ms
}


def _is_percentile_key(key: Any) -> bool:
    m = re.fullmatch(r"p(\d+(?:\.\d+)?)", key) if isinstance(key, str) else None
    return key == "mean" or (m is not None and 0 < float(m.group(1)) < 100)


SLO_KEYS = "mean or pNN with 0 < NN < 100 (p50, p90, p99, p99.9)"

# Keys of the YAML top level that may be left out, beyond the dataclass defaults (Scenario has none).
# `name` is filled in from the file's stem; `source` is ours, not the user's.
TOP_DEFAULTS = {"dtype": "bfloat16", "engine": {}, "workload": {}, "slo": {}}
NOT_USER_KEYS = {(Scenario, "source")}


class _Ctx(NamedTuple):
    file: str  # for messages
    base_dir: Path  # relative paths in the file resolve against it


# ---------------------------------------------------------------------------------------------------------
# Public API


def load_scenario(path: str | Path, overrides: Sequence[str] = ()) -> Scenario:
    """Read, override (`--set key=value` strings) and validate a scenario file. Raises PlannerError."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlannerError(f"{path}: no such scenario file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PlannerError(f"{path}: cannot read the scenario file: {e}") from None
    data = _parse_yaml(text, str(path))
    if data is None and not overrides:
        raise PlannerError(f"{path}: the file is empty; a scenario needs at least `model` and `hardware.gpu`")
    data = apply_overrides({} if data is None else data, overrides, str(path))
    return validate_mapping(data, str(path), path.absolute().parent)


def validate_mapping(data: dict, source: str, base_dir: Path) -> Scenario:
    """Validate an already parsed scenario mapping; `source` names it in messages, `base_dir` anchors paths."""
    ctx = _Ctx(source, Path(base_dir))
    if not isinstance(data, dict):
        raise ScenarioError(source, "top level", data, f"must be a mapping with keys {_keys(Scenario)}")
    raw = {"name": Path(source).stem, **TOP_DEFAULTS, **data}
    scenario = dataclasses.replace(_build(Scenario, raw, "", ctx), source=source)
    return _check_relations(scenario, raw, ctx)


def apply_overrides(data: dict, overrides: Sequence[str], source: str) -> dict:
    """`engine.max_num_seqs=4` -> data["engine"]["max_num_seqs"] = 4 (value read as YAML), on a copy."""
    data = copy.deepcopy(data)
    if overrides and not isinstance(data, dict):
        return data  # validate_mapping reports the top level
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(parts):
            raise PlannerError(f"--set {item}: expected dotted.key=value, e.g. engine.max_num_seqs=128")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise PlannerError(f"--set {item}: the value is not valid YAML: {getattr(e, 'problem', e)}") from None
        node = data
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}  # create intermediate mappings
            node = node[part]
            if not isinstance(node, dict):
                where = ".".join(parts[: i + 1])
                raise PlannerError(f"--set {item}: {source}: {where} is {show_value(node)}, not a mapping")
        node[parts[-1]] = value
    return data


def scenario_to_dict(s: Scenario) -> dict:
    """The resolved scenario as JSON-able data (for summary.json): specs expanded, defaults filled in."""
    out = dataclasses.asdict(s)
    out["model"]["num_params"] = s.model.num_params  # derived, but what a reader of a summary looks for
    out["max_model_len"] = s.max_model_len
    out["kv_dtype"] = s.kv_dtype
    return out


# ---------------------------------------------------------------------------------------------------------
# YAML


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping; PyYAML would silently keep the last."""


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:  # an unhashable key: the base constructor reports it
            break
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark, f"found duplicate key {key!r}", key_node.start_mark
            )
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)  # safe: a SafeLoader subclass
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        what = "; ".join(p for p in (e.context, e.problem) if p)
        raise PlannerError(f"{source}: {where}invalid YAML: {what}") from None
    except yaml.YAMLError as e:
        raise PlannerError(f"{source}: invalid YAML: {e}") from None


# ---------------------------------------------------------------------------------------------------------
# The generic walk


def _build(cls: type, data: Any, path: str, ctx: _Ctx) -> Any:
    """A mapping -> `cls(**fields)`, checking keys, types and rules of every field."""
    fields = {f.name: f for f in dataclasses.fields(cls) if (cls, f.name) not in NOT_USER_KEYS}
    if not isinstance(data, dict):
        raise ScenarioError(ctx.file, path, data, f"expected a mapping with keys {_keys(cls)}")
    for key in data:
        if key not in fields:
            hint = _did_you_mean(str(key), list(fields))
            raise ScenarioError(ctx.file, _join(path, key), NO_VALUE, f"unknown key{hint}; allowed: {_keys(cls)}")
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


def _convert(cls: type, name: str, hint: Any, value: Any, key_path: str, ctx: _Ctx) -> Any:
    """One value -> its field's type, then its rule. Specials (model, gpu, trace path) resolve here."""
    if (cls, name) in SPECIAL:
        return SPECIAL[(cls, name)][0](value, key_path, ctx)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # `X | None`
        if value is None:
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, key_path, ctx)
    if typing.get_origin(hint) is dict:  # the SLO tables: statistic -> bound in ms
        if not isinstance(value, dict):
            raise _type_error(cls, name, hint, value, key_path, ctx)
        for key in value:
            if not _is_percentile_key(key):
                hint_msg = _did_you_mean(str(key), ["mean", "p50", "p90", "p99"])
                raise ScenarioError(
                    ctx.file, _join(key_path, key), NO_VALUE, f"unknown statistic{hint_msg}; allowed: {SLO_KEYS}"
                )
        value_type = typing.get_args(hint)[1]
        return {k: _convert_scalar(cls, name, value_type, v, _join(key_path, k), ctx) for k, v in value.items()}
    if hint in TYPE_NAMES:
        return _convert_scalar(cls, name, hint, value, key_path, ctx)
    raise TypeError(f"planner.scenario cannot validate {cls.__name__}.{name}: {hint}")  # a new kind of field


def _convert_scalar(cls: type, name: str, hint: type, value: Any, key_path: str, ctx: _Ctx) -> Any:
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
        hint_msg = _did_you_mean(value, rule.choices) if rule.choices and isinstance(value, str) else ""
        raise ScenarioError(ctx.file, key_path, value, rule.allowed + hint_msg)
    return value


def _type_error(cls: type, name: str, hint: Any, value: Any, key_path: str, ctx: _Ctx) -> ScenarioError:
    allowed = "expected " + _expected(cls, name, hint)
    if isinstance(value, str) and hint in (int, float) and _parses_as_float(value):
        allowed += " (this is text: write the number without quotes, and an exponent as 1.0e+3, not 1e3)"
    return ScenarioError(ctx.file, key_path, value, allowed)


# ---------------------------------------------------------------------------------------------------------
# The special fields: catalog names, local files, inline mappings


def _catalog():
    # Imported late: the catalog reads its YAML on use, and `planner.scenario` must import without it.
    from planner import catalog

    return catalog


def _resolve_model(value: Any, key_path: str, ctx: _Ctx) -> ModelSpec:
    catalog = _catalog()
    if isinstance(value, dict):  # inline HF config.json fields
        config = dict(value)
        name = str(config.pop("name", "inline"))
        try:
            return catalog.model_spec_from_hf_config(config, name)
        except (ValueError, TypeError, KeyError) as e:
            raise ScenarioError(ctx.file, key_path, NO_VALUE, _reason(e)) from None
    if not isinstance(value, str) or not value:
        raise ScenarioError(ctx.file, key_path, value, "expected " + _model_help())
    models = catalog.load_model_catalog()
    if value in models:
        return models[value]
    path = _resolve_path(value, ctx)
    if path.exists():
        try:
            return catalog.load_model_config_path(path)
        except (ValueError, TypeError, KeyError, OSError) as e:
            raise ScenarioError(ctx.file, key_path, value, f"cannot read model config {path}: {_reason(e)}") from None
    hint = _did_you_mean(value, list(models))
    raise ScenarioError(
        ctx.file, key_path, value,
        f"not a catalog model{hint} and no such file or folder {path}; catalog models: {', '.join(sorted(models))}",
    )  # fmt: skip


def _model_help() -> str:
    names = ", ".join(sorted(_catalog().load_model_catalog()))
    return f"a catalog model ({names}), a path to an HF config.json or model folder, or a mapping of HF config fields"


def _resolve_gpu(value: Any, key_path: str, ctx: _Ctx) -> GpuSpec:
    catalog = _catalog()
    if isinstance(value, dict):  # inline spec: the GpuSpec fields
        spec = dict(value)
        name = str(spec.pop("name", "inline"))
        try:
            return catalog.gpu_spec_from_mapping(spec, name)
        except (ValueError, TypeError, KeyError) as e:
            raise ScenarioError(ctx.file, key_path, NO_VALUE, _reason(e)) from None
    gpus = catalog.load_gpu_catalog()
    if isinstance(value, str) and value in gpus:
        return gpus[value]
    hint = _did_you_mean(value, list(gpus)) if isinstance(value, str) else ""
    raise ScenarioError(ctx.file, key_path, value, f"unknown GPU{hint}; " + _gpu_help())


def _gpu_help() -> str:
    names = ", ".join(sorted(_catalog().load_gpu_catalog()))
    gpu_keys = ", ".join(f.name for f in dataclasses.fields(GpuSpec) if f.name != "name")
    return f"a catalog GPU ({names}) or a mapping with the fields {gpu_keys}"


def _resolve_trace_path(value: Any, key_path: str, ctx: _Ctx) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(
            ctx.file, key_path, value, "expected a path to a CSV trace (relative to the scenario's folder)"
        )
    path = _resolve_path(value, ctx)
    if not path.is_file():
        raise ScenarioError(ctx.file, key_path, value, f"no such file: {path}")
    return str(path)  # absolute: nothing below planner/ knows the scenario's folder


def _resolve_path(value: str, ctx: _Ctx) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else (ctx.base_dir / path).resolve()


SPECIAL: dict[tuple[type, str], tuple[Callable[[Any, str, _Ctx], Any], Callable[[], str]]] = {
    (Scenario, "model"): (_resolve_model, _model_help),
    (HardwareConfig, "gpu"): (_resolve_gpu, _gpu_help),
    (TraceConfig, "path"): (_resolve_trace_path, lambda: "a path to a CSV trace (relative to the scenario's folder)"),
}


# ---------------------------------------------------------------------------------------------------------
# Rules that involve more than one field


def _check_relations(s: Scenario, raw: dict, ctx: _Ctx) -> Scenario:
    def fail(key_path: str, value: Any, allowed: str) -> typing.NoReturn:
        raise ScenarioError(ctx.file, key_path, value, allowed)

    m, hw, eng, wl = s.model, s.hardware, s.engine, s.workload

    # Tensor parallel, as vLLM's QKVParallelLinear: query heads are split evenly; KV heads are split when
    # there are at least tp of them, else each is replicated on tp/num_kv_heads GPUs.
    tp = hw.tensor_parallel_size
    if m.num_attention_heads % tp:
        fail(
            "hardware.tensor_parallel_size",
            tp,
            f"must divide the model's num_attention_heads ({m.num_attention_heads})",
        )
    kv = m.num_key_value_heads
    if (kv % tp if tp < kv else tp % kv) != 0:
        fail(
            "hardware.tensor_parallel_size", tp,
            f"must divide the model's num_key_value_heads ({kv}) or be a multiple of it (KV heads are replicated)",
        )  # fmt: skip

    # max_model_len: the model's limit by default; above it is an error, as in vLLM.
    limit = m.max_position_embeddings
    max_len = eng.max_model_len or limit
    if max_len > limit:
        fail("engine.max_model_len", max_len, f"must be <= the model's max_position_embeddings ({limit})")
    # vLLM's default token budget without chunked prefill is max(max_model_len, 2048): a whole prompt per step.
    budget = eng.max_num_batched_tokens
    if not eng.enable_chunked_prefill and "max_num_batched_tokens" not in (raw.get("engine") or {}):
        budget = max(max_len, budget)
    if not eng.enable_chunked_prefill and budget < max_len:
        fail(
            "engine.max_num_batched_tokens", budget,
            f"is smaller than max_model_len ({max_len}) with enable_chunked_prefill false, so longer prompts could "
            "never be scheduled; raise max_num_batched_tokens, lower max_model_len or enable chunked prefill",
        )  # fmt: skip
    if budget < eng.max_num_seqs:  # vLLM's SchedulerConfig raises this too
        fail("engine.max_num_batched_tokens", budget, f"must be >= max_num_seqs ({eng.max_num_seqs})")
    eng = dataclasses.replace(eng, max_model_len=max_len, max_num_batched_tokens=budget)

    # What each distribution and arrival process needs.
    for field_name in ("prompt_tokens", "output_tokens"):
        d: Distribution = getattr(wl, field_name)
        where = f"workload.{field_name}"
        for p in DIST_PARAMS:
            given = getattr(d, p) is not None
            if p in DISTS[d.dist] and not given:
                fail(f"{where}.{p}", NO_VALUE, f"missing; dist {d.dist} needs {', '.join(DISTS[d.dist])}")
            if p not in DISTS[d.dist] and given:
                uses = ", ".join(DISTS[d.dist]) or "no parameters (lengths come from workload.trace)"
                fail(f"{where}.{p}", getattr(d, p), f"not used by dist {d.dist}, which takes {uses}")
        if d.dist == "uniform" and d.low > d.high:
            fail(f"{where}.low", d.low, f"must be <= high ({d.high})")
        if d.max is not None and d.min > d.max:
            fail(f"{where}.min", d.min, f"must be <= max ({d.max})")
        if d.dist == "trace" and wl.trace is None:
            fail(f"{where}.dist", d.dist, "needs workload.trace (path and columns of a CSV trace)")
    a = wl.arrival
    for p in PROCESSES[a.process]:
        if getattr(a, p) is None:
            fail(f"workload.arrival.{p}", NO_VALUE, f"missing; process {a.process} needs {p} ({ARRIVAL_UNITS[p]})")
    if a.process == "trace" and wl.trace is None:
        fail("workload.arrival.process", a.process, "needs workload.trace (path and columns of a CSV trace)")
    if a.process == "trace" and wl.trace.arrival_column is None:
        fail("workload.trace.arrival_column", None, "process trace needs the column of arrival times")
    if wl.trace is not None:
        _check_trace_columns(wl, ctx)
    return dataclasses.replace(s, engine=eng)


def _check_trace_columns(wl: WorkloadConfig, ctx: _Ctx) -> None:
    """The columns the workload will read exist in the CSV's header (cheap, and a typo is likely)."""
    t = wl.trace
    used = {
        "prompt_column": wl.prompt_tokens.dist == "trace",
        "output_column": wl.output_tokens.dist == "trace",
        "arrival_column": wl.arrival.process == "trace",
    }
    if not any(used.values()):
        raise ScenarioError(
            ctx.file, "workload.trace", NO_VALUE,
            "is set but unused: set prompt_tokens.dist, output_tokens.dist and/or arrival.process to trace",
        )  # fmt: skip
    if not t.path.lower().endswith(".csv"):
        return  # another format: the workload reader checks it
    with open(t.path, newline="", encoding="utf-8") as f:
        header = [name.strip() for name in next(csv.reader(f), [])]  # as sim/workload.py reads it
    for key, is_used in used.items():
        column = getattr(t, key)
        if is_used and column not in header:
            hint = _did_you_mean(column, header)
            raise ScenarioError(
                ctx.file,
                f"workload.trace.{key}",
                column,
                f"no such column in {t.path}{hint}; columns: {', '.join(header)}",
            )


# ---------------------------------------------------------------------------------------------------------
# Message helpers


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _keys(cls: type) -> str:
    return ", ".join(f.name for f in dataclasses.fields(cls) if (cls, f.name) not in NOT_USER_KEYS)


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    by_lower = {str(c).lower(): str(c) for c in choices}
    close = difflib.get_close_matches(str(word).lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""


TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _expected(cls: type, name: str, hint: Any) -> str:
    """What a field takes, in words: its type and, where there is one, its rule."""
    if (cls, name) in SPECIAL:
        return SPECIAL[(cls, name)][1]()
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = args[0]
    if dataclasses.is_dataclass(hint):
        return f"a mapping with keys {_keys(hint)}"
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


def _reason(e: BaseException) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
