"""The three fields resolved specially, from catalog names, local files or inline mappings: `model`,
`hardware.gpu` and `workload.trace.path`. `SPECIAL` maps each to its resolver and its help text."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planner.errors import NO_SUCH_USER, NO_VALUE, ScenarioError, expand_user
from planner.paths import shown, too_long
from planner.scenario.rules import RULES, Ctx, did_you_mean
from sim.config import GpuSpec, HardwareConfig, ModelSpec, Scenario, TraceConfig


def _catalog():
    # Imported late: the catalog reads its YAML on use, and `planner.scenario.load` must import without it.
    from planner import catalog

    return catalog


def _resolve_model(value: Any, key_path: str, ctx: Ctx) -> ModelSpec:
    catalog = _catalog()
    if isinstance(value, dict):  # inline HF config.json fields
        config = dict(value)
        name = str(config.pop("name", "inline"))
        try:
            spec = catalog.model_spec_from_hf_config(config, name)
        except (ValueError, TypeError, KeyError) as e:
            raise ScenarioError(ctx.file, key_path, NO_VALUE, _reason(e)) from None
        return check_ranges(spec, key_path, ctx)
    if not isinstance(value, str) or not value:
        raise ScenarioError(ctx.file, key_path, value, "expected " + _model_help())
    models = catalog.model_names()
    if value in models:
        return catalog.catalog_model(value)
    path = _resolve_path(value, key_path, ctx, folder=True)  # a config.json, or the folder that holds one
    config = path / "config.json" if path.is_dir() else path
    if config.exists() and not config.is_file():  # a FIFO or a device would block the read
        raise ScenarioError(ctx.file, key_path, value, f"{config} is not a regular file")
    if path.exists():
        try:
            spec = catalog.load_model_config_path(path)
        except (ValueError, TypeError, KeyError, OSError, RecursionError) as e:
            raise ScenarioError(ctx.file, key_path, value, f"cannot read model config {path}: {_reason(e)}") from None
        return check_ranges(spec, key_path, ctx)
    hint = did_you_mean(value, models)
    raise ScenarioError(
        ctx.file, key_path, value,
        f"not a catalog model{hint} and no such file or folder {path}; catalog models: {', '.join(sorted(models))}",
    )  # fmt: skip


def _model_help() -> str:
    names = ", ".join(sorted(_catalog().model_names()))
    return f"a catalog model ({names}), a path to an HF config.json or model folder, or a mapping of HF config fields"


def _resolve_gpu(value: Any, key_path: str, ctx: Ctx) -> GpuSpec:
    catalog = _catalog()
    if isinstance(value, dict):  # inline spec: the GpuSpec fields
        spec = dict(value)
        name = str(spec.pop("name", "inline"))
        try:
            gpu = catalog.gpu_spec_from_mapping(spec, name)
        except (ValueError, TypeError, KeyError) as e:
            raise ScenarioError(ctx.file, key_path, NO_VALUE, _reason(e)) from None
        return check_ranges(gpu, key_path, ctx)
    gpus = catalog.gpu_names()
    if isinstance(value, str) and value in gpus:
        return catalog.catalog_gpu(value)
    hint = did_you_mean(value, gpus) if isinstance(value, str) else ""
    raise ScenarioError(ctx.file, key_path, value, f"unknown GPU{hint}; " + _gpu_help())


def _gpu_help() -> str:
    names = ", ".join(sorted(_catalog().gpu_names()))
    gpu_keys = ", ".join(f.name for f in dataclasses.fields(GpuSpec) if f.name != "name")
    return f"a catalog GPU ({names}) or a mapping with the fields {gpu_keys}"


TRACE_PATH_HELP = "a path to a CSV or JSONL trace file (relative to the scenario's folder)"


def _resolve_trace_path(value: Any, key_path: str, ctx: Ctx) -> str:
    if not isinstance(value, str) or not value:
        raise ScenarioError(ctx.file, key_path, value, f"expected {TRACE_PATH_HELP}")
    path = _resolve_path(value, key_path, ctx)
    if not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file" if path.exists() else "no such file"
        raise ScenarioError(ctx.file, key_path, value, f"{what}: {path}; expected a CSV or JSONL trace file")
    return str(path)  # absolute: nothing below planner/ knows the scenario's folder


def _resolve_path(value: str, key_path: str, ctx: Ctx, folder: bool = False) -> Path:
    if "\0" in value:  # the OS cannot take it (and would raise ValueError deep in pathlib)
        raise ScenarioError(ctx.file, key_path, value, "a path cannot hold a NUL character")
    path = expand_user(value)
    if path is None:
        raise ScenarioError(ctx.file, key_path, value, NO_SUCH_USER)
    path = path if path.is_absolute() else ctx.base_dir / path
    reason = too_long(path, folder)
    if reason is not None:  # resolve() and every check after it would raise ENAMETOOLONG
        raise ScenarioError(ctx.file, key_path, shown(value), reason)
    return path.resolve()


def check_ranges(spec: GpuSpec | ModelSpec, key_path: str, ctx: Ctx) -> GpuSpec | ModelSpec:
    """A spec the catalog built from the user's mapping or config.json, against RULES' ranges: the catalog
    checks types and signs, not what a real GPU or model could have."""
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ScenarioError(ctx.file, f"{key_path}.{f.name}", value, "must be a finite number")
        rule = RULES.get((type(spec), f.name))
        if rule is not None and value is not None and not rule.ok(value):
            raise ScenarioError(ctx.file, f"{key_path}.{f.name}", value, rule.allowed)
    return spec


def _reason(e: BaseException) -> str:
    return str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)


SPECIAL: dict[tuple[type, str], tuple[Callable[[Any, str, Ctx], Any], Callable[[], str]]] = {
    (Scenario, "model"): (_resolve_model, _model_help),
    (HardwareConfig, "gpu"): (_resolve_gpu, _gpu_help),
    (TraceConfig, "path"): (_resolve_trace_path, lambda: TRACE_PATH_HELP),
}
